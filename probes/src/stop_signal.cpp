#include "ibprobe/stop_signal.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace ibprobe::probes {

StopSignal::StopSignal(std::stop_token token)
    : token_(std::move(token)), fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!fd_) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
  on_stop_.emplace(token_, Notify{fd_.get()});
}

StopSignal::~StopSignal() {
  // The callback goes first: once it is gone no stop request writes to the descriptor.
  on_stop_.reset();
}

void StopSignal::Notify::operator()() const {
  const std::uint64_t one = 1;
  // Cannot fail short of overflowing the counter, which one write per stop cannot do.
  [[maybe_unused]] const auto written = ::write(fd, &one, sizeof(one));
}

bool StopSignal::wait_for(std::chrono::milliseconds duration) const {
  pollfd p{fd_.get(), POLLIN, 0};
  const auto until = std::chrono::steady_clock::now() + duration;
  while (!token_.stop_requested()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    if (::poll(&p, 1, static_cast<int>(left.count())) < 0 && errno != EINTR) return false;
  }
  return true;
}

}  // namespace ibprobe::probes

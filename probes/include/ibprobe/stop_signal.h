// A std::stop_token as a file descriptor: it becomes readable once stop is requested, so a wait
// in poll() on a socket ends at once on a stop as well (client gone, shutdown, an abandoned run).
#pragma once

#include <chrono>
#include <optional>
#include <stop_token>

#include "ibprobe/unique_fd.h"

namespace ibprobe::probes {

class StopSignal {
 public:
  explicit StopSignal(std::stop_token token);
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  // Readable (POLLIN) once stop was requested; never read from, so it stays readable.
  int fd() const { return fd_.get(); }
  bool stop_requested() const { return token_.stop_requested(); }
  const std::stop_token& token() const { return token_; }
  // Sleeps for `duration` unless stop is requested first; true when it was.
  bool wait_for(std::chrono::milliseconds duration) const;

 private:
  struct Notify {
    int fd;
    void operator()() const;
  };

  std::stop_token token_;
  UniqueFd fd_;
  std::optional<std::stop_callback<Notify>> on_stop_;
};

}  // namespace ibprobe::probes

#include "client_watch.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace ibprobe::exporter {
namespace {

// Port and numeric address of one end of a socket; port -1 when it has none.
std::pair<int, std::string> endpoint(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    ::inet_ntop(AF_INET, &v4.sin_addr, text, sizeof(text));
    return {ntohs(v4.sin_port), text};
  }
  if (address.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
    ::inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof(text));
    return {ntohs(v6.sin6_port), text};
  }
  return {-1, ""};
}

}  // namespace

int find_connection_socket(int local_port, const std::string& peer_address, int peer_port) {
  struct CloseDir {
    void operator()(DIR* dir) const { ::closedir(dir); }
  };
  std::unique_ptr<DIR, CloseDir> dir(::opendir("/proc/self/fd"));
  if (!dir) return -1;
  const int own = ::dirfd(dir.get());
  while (const dirent* entry = ::readdir(dir.get())) {
    int fd = -1;
    const std::string_view name(entry->d_name);
    if (std::from_chars(name.data(), name.data() + name.size(), fd).ec != std::errc() ||
        fd == own) {
      continue;
    }
    struct stat info {};
    if (::fstat(fd, &info) != 0 || !S_ISSOCK(info.st_mode)) continue;
    sockaddr_storage peer{}, local{};
    socklen_t peer_length = sizeof(peer), local_length = sizeof(local);
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_length) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_length) != 0) {
      continue;
    }
    const auto [remote_port, remote_address] = endpoint(peer);
    if (remote_port != peer_port || endpoint(local).first != local_port) continue;
    if (remote_address == peer_address) return fd;
  }
  return -1;
}

ClientWatch::ClientWatch()
    : epoll_fd_(::epoll_create1(EPOLL_CLOEXEC)), wake_fd_(::eventfd(0, EFD_CLOEXEC)) {
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    throw std::runtime_error(std::string("cannot watch HTTP clients: ") + std::strerror(errno));
  }
  epoll_event wake{};
  wake.events = EPOLLIN;
  wake.data.u64 = 0;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &wake);
  thread_ = std::thread([this] { run(); });
}

ClientWatch::~ClientWatch() {
  stop_all();
  thread_.join();
  ::close(wake_fd_);
  ::close(epoll_fd_);
}

void ClientWatch::stop_all() {
  std::lock_guard lock(mutex_);
  if (stopped_) return;
  stopped_ = true;
  for (auto& [key, source] : watched_) source.request_stop();
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto written = ::write(wake_fd_, &one, sizeof(one));
}

void ClientWatch::run() {
  epoll_event events[32];
  while (true) {
    const int n = ::epoll_wait(epoll_fd_, events, 32, -1);
    if (n < 0 && errno != EINTR) return;
    std::lock_guard lock(mutex_);
    if (stopped_) return;
    for (int i = 0; i < n; ++i) {
      if (const auto found = watched_.find(events[i].data.u64); found != watched_.end()) {
        found->second.request_stop();
      }
    }
  }
}

ClientWatch::Watched::Watched(ClientWatch& watch, int fd) : watch_(watch), fd_(fd), key_(0) {
  std::lock_guard lock(watch_.mutex_);
  if (watch_.stopped_) {
    source_.request_stop();
    return;
  }
  key_ = watch_.next_key_++;
  watch_.watched_.emplace(key_, source_);
  if (fd_ < 0) return;  // not found: only the server's stop reaches this request
  epoll_event event{};
  // The peer's FIN (EPOLLRDHUP), a reset (EPOLLERR, EPOLLHUP). One report is enough.
  event.events = EPOLLRDHUP | EPOLLONESHOT;
  event.data.u64 = key_;
  if (::epoll_ctl(watch_.epoll_fd_, EPOLL_CTL_ADD, fd_, &event) != 0) fd_ = -1;
}

ClientWatch::Watched::~Watched() {
  std::lock_guard lock(watch_.mutex_);
  if (fd_ >= 0) ::epoll_ctl(watch_.epoll_fd_, EPOLL_CTL_DEL, fd_, nullptr);
  watch_.watched_.erase(key_);
}

}  // namespace ibprobe::exporter

#include "client_watch.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>

namespace ibprobe::exporter {
namespace {

// "0100007F:1F90" as /proc/net/tcp writes it (the address as the kernel's 32-bit words in host
// order, the port in hex), or /proc/net/tcp6's 32 hex digits: the address as inet_ntop writes
// it, and the port; port -1 when the text is neither.
std::pair<std::string, int> proc_endpoint(std::string_view text) {
  const auto colon = text.find(':');
  if (colon == std::string_view::npos) return {"", -1};
  const auto address = text.substr(0, colon), port_text = text.substr(colon + 1);
  int port = -1;
  if (std::from_chars(port_text.data(), port_text.data() + port_text.size(), port, 16).ec !=
      std::errc()) {
    return {"", -1};
  }
  const std::size_t words = address.size() / 8;
  if ((words != 1 && words != 4) || address.size() % 8 != 0) return {"", -1};
  std::uint32_t raw[4] = {};
  for (std::size_t i = 0; i < words; ++i) {
    const auto word = address.substr(i * 8, 8);
    if (std::from_chars(word.data(), word.data() + 8, raw[i], 16).ec != std::errc()) {
      return {"", -1};
    }
  }
  char out[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(words == 1 ? AF_INET : AF_INET6, raw, out, sizeof(out));
  return {out, port};
}

// The inode of the TCP socket from local port `local_port` to `peer_address`:`peer_port`, from
// the kernel's connection tables; 0 when there is none.
unsigned long connection_inode(int local_port, const std::string& peer_address, int peer_port) {
  for (const char* table : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout;
      unsigned long inode = 0;
      if (!(fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
            timeout >> inode)) {
        continue;
      }
      if (proc_endpoint(local).second != local_port) continue;
      const auto [address, port] = proc_endpoint(remote);
      if (port == peer_port && address == peer_address) return inode;
    }
  }
  return 0;
}

}  // namespace

int find_connection_socket(int local_port, const std::string& peer_address, int peer_port) {
  const unsigned long inode = connection_inode(local_port, peer_address, peer_port);
  if (inode == 0) return -1;
  // The descriptors' links name their sockets: reading them touches no descriptor, so other
  // threads opening and closing theirs meanwhile are no concern.
  const std::string wanted = "socket:[" + std::to_string(inode) + "]";
  struct CloseDir {
    void operator()(DIR* dir) const { ::closedir(dir); }
  };
  std::unique_ptr<DIR, CloseDir> dir(::opendir("/proc/self/fd"));
  if (!dir) return -1;
  while (const dirent* entry = ::readdir(dir.get())) {
    char link[64];
    const ssize_t length = ::readlinkat(::dirfd(dir.get()), entry->d_name, link, sizeof(link));
    if (length <= 0 || std::string_view(link, static_cast<std::size_t>(length)) != wanted) continue;
    int fd = -1;
    const std::string_view name(entry->d_name);
    if (std::from_chars(name.data(), name.data() + name.size(), fd).ec == std::errc()) return fd;
  }
  return -1;
}

ClientWatch::ClientWatch()
    : epoll_fd_(::epoll_create1(EPOLL_CLOEXEC)), wake_fd_(::eventfd(0, EFD_CLOEXEC)) {
  if (!epoll_fd_ || !wake_fd_) {
    throw std::runtime_error(std::string("cannot watch HTTP clients: ") + std::strerror(errno));
  }
  epoll_event wake{};
  wake.events = EPOLLIN;
  wake.data.u64 = 0;
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, wake_fd_.get(), &wake);
  thread_ = std::thread([this] { run(); });
}

ClientWatch::~ClientWatch() {
  stop_all();
  thread_.join();
}

void ClientWatch::stop_all() {
  std::lock_guard lock(mutex_);
  if (stopped_) return;
  stopped_ = true;
  for (auto& [key, source] : watched_) source.request_stop();
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto written = ::write(wake_fd_.get(), &one, sizeof(one));
}

void ClientWatch::run() {
  epoll_event events[32];
  while (true) {
    const int n = ::epoll_wait(epoll_fd_.get(), events, 32, -1);
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
  if (::epoll_ctl(watch_.epoll_fd_.get(), EPOLL_CTL_ADD, fd_, &event) != 0) fd_ = -1;
}

ClientWatch::Watched::~Watched() {
  std::lock_guard lock(watch_.mutex_);
  if (fd_ >= 0) ::epoll_ctl(watch_.epoll_fd_.get(), EPOLL_CTL_DEL, fd_, nullptr);
  watch_.watched_.erase(key_);
}

}  // namespace ibprobe::exporter

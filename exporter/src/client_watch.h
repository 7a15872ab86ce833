// Tells a waiting HTTP handler that its client went away. civetweb 1.15 gives a handler no
// notice of a closed connection and no access to its socket, and the handler's worker does not
// read the socket while the handler waits; so the socket is found by its addresses and one
// thread watches every waiting handler's socket with epoll for the peer's FIN or a reset.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>

#include "ibprobe/unique_fd.h"

namespace ibprobe::exporter {

class ClientWatch {
 public:
  // One watched connection, for as long as it lives (the handler's scope: the socket must not
  // be closed before this is gone).
  class Watched {
   public:
    Watched(ClientWatch& watch, int fd);
    ~Watched();
    Watched(const Watched&) = delete;
    Watched& operator=(const Watched&) = delete;
    // Stops when the client disconnects or the server stops.
    std::stop_token token() const { return source_.get_token(); }

   private:
    ClientWatch& watch_;
    int fd_;
    std::uint64_t key_;
    std::stop_source source_;
  };

  ClientWatch();
  ~ClientWatch();
  ClientWatch(const ClientWatch&) = delete;
  ClientWatch& operator=(const ClientWatch&) = delete;

  // Stops every watched connection, and every one watched from now on.
  void stop_all();

 private:
  void run();

  UniqueFd epoll_fd_;
  UniqueFd wake_fd_;
  std::mutex mutex_;
  bool stopped_ = false;
  std::uint64_t next_key_ = 1;  // 0 is the wake descriptor
  std::map<std::uint64_t, std::stop_source> watched_;
  std::thread thread_;
};

// The descriptor of this process's TCP socket from local port `local_port` to the peer
// `peer_address` (numeric, as inet_ntop writes it) port `peer_port`; -1 when there is none.
int find_connection_socket(int local_port, const std::string& peer_address, int peer_port);

}  // namespace ibprobe::exporter

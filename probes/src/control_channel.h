// The control connection between initiator and responder: protocol frames over a TCP socket,
// every read and write bounded by a deadline, every frame bounded in size before it is read.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <string>
#include <vector>

#include "ibprobe/peer_address.h"
#include "ibprobe/stop_signal.h"
#include "ibprobe/unique_fd.h"
#include "protocol.h"

namespace ibprobe::probes {

class ControlChannel {
 public:
  using Deadline = std::chrono::steady_clock::time_point;

  // HOST's addresses; throws ProbeFailure (unreachable) when it does not resolve.
  static std::vector<IpAddress> resolve(const std::string& host, const std::string& port);
  // Connects to PORT at exactly `addresses`, in order, the first that answers (HOST names them
  // in messages); throws ProbeFailure with the reason. Every wait of the channel ends at the
  // deadline, or at once when `stop` (which outlives the channel; may be null) fires.
  static ControlChannel connect(const std::string& host, const std::string& port,
                                const std::vector<IpAddress>& addresses, Deadline deadline,
                                const StopSignal* stop);
  explicit ControlChannel(int fd, const StopSignal* stop = nullptr);
  ControlChannel(ControlChannel&& other) noexcept = default;
  ControlChannel& operator=(ControlChannel&&) = delete;
  ControlChannel(const ControlChannel&) = delete;
  ~ControlChannel() = default;

  void send(const protocol::Message& message, Deadline deadline);
  protocol::Message receive(Deadline deadline);

  // Receives a message of type T; an Error or ProbeReject from the peer, or any other type,
  // becomes a ProbeFailure that says what the peer said.
  template <class T>
  T expect(Deadline deadline, const char* what) {
    auto message = receive(deadline);
    if (auto* wanted = std::get_if<T>(&message)) return std::move(*wanted);
    fail_unexpected(message, what);
  }

  const std::string& peer() const { return peer_; }
  // The connection's two ends as the kernel has them (getpeername, getsockname): where an
  // rdma_cm connection to the same host is made.
  sockaddr_storage peer_address() const;
  sockaddr_storage local_address() const;
  // Throws ProbeFailure when the peer has closed the connection (or sent something unexpected)
  // while a run is in progress; returns at once otherwise.
  void check_still_open() const;
  // The same for a reader of the peer's next message: a message waiting to be read is not a
  // hang-up, even when the peer closed the connection after sending it (a responder closes
  // after its result, and an Error says more than the close behind it).
  void check_open_or_message_waiting() const;
  // True when a frame (or its first bytes) is waiting to be read.
  bool has_pending_message() const;
  // For the initiator during a run, when the responder has nothing to say: a message now can
  // only be its reason for giving up (an Error), so it is read and thrown as ProbeFailure;
  // a closed connection throws too.
  void fail_if_peer_spoke();
  // Throws the ProbeFailure that an unexpected `message` means while waiting for `what`.
  [[noreturn]] void fail_unexpected(const protocol::Message& message, const char* what) const;

 private:
  [[noreturn]] void throw_stopped_answering() const;
  // Both checks above; with `message_waiting_is_open`, a waiting message passes.
  void check_open(bool message_waiting_is_open) const;
  void read_exactly(std::uint8_t* data, std::size_t size, Deadline deadline);

  UniqueFd fd_;
  std::string peer_;
  const StopSignal* stop_;
};

}  // namespace ibprobe::probes

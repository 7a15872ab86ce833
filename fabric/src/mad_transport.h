// Where MADs go and come back from: the kernel's umad interface in production, recorded
// exchanges in tests. The remote PMA collector's logic sees only this interface.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ibprobe::fabric {

class MadTransport {
 public:
  struct Received {
    std::vector<std::uint8_t> mad;
    // 0 for a response. ETIMEDOUT when the transport gave up on a request itself: `mad` is then
    // that request (umad hands a send that got no answer back this way).
    int status = 0;
  };

  virtual ~MadTransport() = default;

  // Whether SMPs (QP0, for NodeInfo) can be sent; PerfMgt MADs (QP1) always can.
  virtual bool sends_smps() const = 0;
  // Hands one 256-byte MAD for `lid` to the fabric, expecting an answer within `timeout`.
  // Returns 0 or an errno.
  virtual int send(std::uint16_t lid, std::span<const std::uint8_t> mad,
                   std::chrono::milliseconds timeout) = 0;
  // The next MAD that came back, or nullopt when none did within `wait`.
  virtual std::optional<Received> receive(std::chrono::milliseconds wait) = 0;
};

// Opening the local port MADs are sent from.
struct UmadOpenResult {
  std::unique_ptr<MadTransport> transport;  // nullptr when the port could not be used
  std::string ca;                           // the local CA and port chosen
  int port = 0;
  std::string reason;  // short label value when unusable: no_umad, not_infiniband, ...
  std::string detail;  // one sentence for the log
};

// `ca` empty: the first InfiniBand port that has a umad device; `port` 0: the CA's first
// InfiniBand port.
UmadOpenResult open_umad_transport(const std::string& ca, int port);

}  // namespace ibprobe::fabric

// Running verbs probes for real: the initiator that drives a run against a peer's responder,
// and the responder every exporter runs on its own TCP port.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ibprobe/probes.h"

namespace ibprobe::probes {

struct LocalPort {
  std::string device;
  std::uint8_t port = 1;
  std::filesystem::path sysfs_root = "/sys";  // where the port's counters are read
};

struct ProbeOutcome {
  ProbeSpec spec;
  std::string peer;
  int gid_index = 0;
  int numa_node = -1;  // the node CPU and buffers were bound to; -1: not bound
  std::uint32_t mtu = 0;
  std::optional<BandwidthStats> bandwidth;
  std::optional<LatencyStats> latency;
  // From the start of the request to the first posted work request: connection, handshake,
  // resource creation and QP transitions on both sides.
  double setup_seconds = 0;
  // Pre-flight facts of both sides ("local"/"peer"), and what they say together: rate_match
  // (both ports at the same rate) and version_match (same software on both sides).
  struct Check {
    std::string side;  // local, peer, or both
    std::string name;
    bool passed = false;
    std::string detail;
  };
  std::vector<Check> checks;

  // Counters of both ports around the run (PortCounters x 4 for data, hw_counters as
  // "hw_counters/<name>"), read after the driver's hw_counters cache lifespan, and what they say
  // with the probe's own figure (DOMAIN.md section 4).
  double window_seconds = 0;
  std::vector<CounterDelta> local_deltas;
  std::vector<CounterDelta> peer_deltas;
  // Fabric ports on the path (switch ports), read over PerfMgt MADs around the run.
  struct FabricDeltas {
    std::string port;  // LID:PORT as asked
    std::vector<CounterDelta> deltas;
  };
  std::vector<FabricDeltas> fabric_deltas;
  LinkReading link;
};

// The first port under <sysfs_root>/class/infiniband whose state is ACTIVE, in device order.
std::optional<LocalPort> first_active_port(const std::filesystem::path& sysfs_root);

// Runs `spec` from `local` against the responder at HOST:PORT. Throws ProbeFailure (a
// std::runtime_error) with the reason when the run cannot complete; every verbs resource is
// released on every path. `fabric_ports` ("LID:PORT", e.g. the switch ports on the path) are
// read over PerfMgt MADs before and after the run; when they cannot be (no InfiniBand port with
// a umad device here), the run goes on and the fabric_ports check says why.
ProbeOutcome run_probe(const LocalPort& local, const std::string& host, const std::string& port,
                       const ProbeSpec& spec, const std::vector<std::string>& fabric_ports = {});

// Serves probe requests on a TCP address, one run at a time, on its own thread. Every number a
// peer sends is checked against `limits` before anything is allocated.
class Responder {
 public:
  // Binds at once (port "0": any free port); throws std::runtime_error when it cannot.
  Responder(const std::string& host, const std::string& port, LocalPort local, Limits limits);
  // Ends a run in progress at once: its control connection is shut down, so the initiator learns
  // why, and the run's verbs resources are released before this returns.
  ~Responder();
  Responder(const Responder&) = delete;
  Responder& operator=(const Responder&) = delete;

  int port() const { return port_; }

 private:
  void serve();
  void handle(int fd);

  LocalPort local_;
  Limits limits_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_ = false;
  std::atomic<int> active_fd_ = -1;
  std::thread thread_;
};

}  // namespace ibprobe::probes

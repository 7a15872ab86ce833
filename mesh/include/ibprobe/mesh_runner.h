// The mesh running in the exporter: this host's plan, recomputed as time and the peer list move
// on, carried out with a UD pinger that also answers the peers' pings.
//
// Two threads: one that may block (reading the peer list, resolving DNS, learning peers'
// addresses over the control channel, each with a deadline) and one that never does, which
// sends the pings on time, sleeps on the completion channel in between and counts the losses.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ibprobe/collectors.h"
#include "ibprobe/mesh_config.h"
#include "ibprobe/mesh_pinger.h"
#include "ibprobe/mesh_plan.h"

namespace ibprobe::mesh {

class MeshRunner {
 public:
  struct Options {
    MeshConfig mesh;
    probes::LocalPort local;
    // The port the peers' responders listen on: the same as this host's, as one DaemonSet or
    // unit file configures every exporter alike.
    std::string responder_port;
    std::string shared_secret;
  };

  // Reads the peer list, brings up the pinger and starts both threads. Throws
  // std::invalid_argument for a mesh configuration that cannot run (no peers source, self not
  // among the peers) and ProbeFailure when the device refuses the pinger.
  explicit MeshRunner(Options options);
  ~MeshRunner();
  MeshRunner(const MeshRunner&) = delete;
  MeshRunner& operator=(const MeshRunner&) = delete;

  // What this host's responder tells peers that ask.
  const probes::MeshEndpoint& endpoint() const;
  collectors::MetricSet metrics() const;
  // The peer list the plan in force was made from (each host with its leaf), and this host's
  // target in it: where the alert receiver picks a peer behind the same leaf or another.
  std::vector<MeshPeer> peers() const;
  const std::string& self() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ibprobe::mesh

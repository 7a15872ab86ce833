// The `mesh:` section of --config.file: whether this exporter runs the mesh, its peers, this
// host, and the planner's policy. --mesh.plan reads it too. Read once at startup: a reload
// leaves a running mesh as it is.
#pragma once

#include <string>

#include "mesh_plan.h"

namespace ibprobe::exporter {

struct MeshConfig {
  bool enabled = false;  // off by default: pings start only where asked for
  // Where the peer list comes from: a file_sd file, or a NAME:PORT resolving to every peer.
  std::string peers_file;
  std::string peers_dns;
  // This host's target in the peer list.
  std::string self;
  MeshPolicy policy;
};

}  // namespace ibprobe::exporter

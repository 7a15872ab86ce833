// The `mesh:` section of --config.file: the mesh's peers, this host, and the planner's policy.
// --mesh.plan reads it; the prober that will run the plan is not part of the exporter yet, so
// there is no switch to turn a mesh on.
#pragma once

#include <string>

#include "mesh_plan.h"

namespace ibprobe::exporter {

struct MeshConfig {
  // Where the peer list comes from: a file_sd file, or a NAME:PORT resolving to every peer.
  std::string peers_file;
  std::string peers_dns;
  // This host's target in the peer list.
  std::string self;
  MeshPolicy policy;
};

}  // namespace ibprobe::exporter

// The `mesh:` section of --config.file: the continuous probe mesh, off unless enabled.
#pragma once

#include <string>

#include "mesh_plan.h"

namespace ibprobe::exporter {

struct MeshConfig {
  bool enabled = false;
  // Where the peer list comes from: a file_sd file, or a NAME:PORT resolving to every peer.
  std::string peers_file;
  std::string peers_dns;
  // This host's target in the peer list.
  std::string self;
  MeshPolicy policy;
};

}  // namespace ibprobe::exporter

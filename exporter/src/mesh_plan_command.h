// `ibprobe_exporter --mesh.plan`: prints a host's mesh plan at a given time and exits, so an
// operator can see who pings whom without running the mesh.
#pragma once

#include <ostream>

#include "ibprobe/exporter.h"

namespace ibprobe::exporter {

// Prints one JSON object per line, {"peer","reason","rate"} (with "self" first when
// config.mesh_self is "*", for every host). Peers and self come from the --mesh.* flags, or else
// from the mesh section of --config.file, the policy from that section. Returns the exit code;
// errors go to `err`.
int run_mesh_plan(const Config& config, std::ostream& out, std::ostream& err);

}  // namespace ibprobe::exporter

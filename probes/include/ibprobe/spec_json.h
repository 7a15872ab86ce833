// A probe's spec as JSON, with one spelling for each key: what the control protocol sends a
// responder, and what the probe API and /probe?debug=true show of a run.
#pragma once

#include <nlohmann/json.hpp>

#include "ibprobe/probes.h"

namespace ibprobe::probes {

// Optional fields are absent when unset (perftest's rule decides; a run's outcome says what was
// used), and the fields later releases added only when they differ from their defaults, so a
// plain probe's request reads the same to a peer that predates them.
nlohmann::json spec_to_json(const ProbeSpec& spec);

}  // namespace ibprobe::probes

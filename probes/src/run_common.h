// What the initiator and the responder of a run share: the software version they announce, the
// bound on their handshake, and how each reads its port's counters around the run.
#pragma once

#include <chrono>

#include "ibprobe/probes.h"
#include "ibprobe/verbs_probe.h"

namespace ibprobe::probes {

inline constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
inline constexpr const char* kSoftwareVersion = "ibprobe " IBPROBE_VERSION;

// The port's counters, taken once the driver's hw_counters cache can no longer hide the run.
CounterSnapshot snapshot_after_lifespan(const LocalPort& local);

}  // namespace ibprobe::probes

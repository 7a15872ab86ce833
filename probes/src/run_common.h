// What the initiator and the responder of a run share: the software version they announce, the
// bound on their handshake, and how each reads its port's counters around the run.
#pragma once

#include <chrono>
#include <string>

#include "control_channel.h"
#include "ibprobe/probes.h"
#include "ibprobe/stop_signal.h"
#include "ibprobe/verbs_probe.h"
#include "peer_auth.h"

namespace ibprobe::probes {

inline constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
inline constexpr const char* kSoftwareVersion = "ibprobe " IBPROBE_VERSION;

// The port's counters, taken once the driver's hw_counters cache can no longer hide the run.
CounterSnapshot snapshot_after_lifespan(const LocalPort& local);

// Throws ProbeFailure (kCancelled) once the run's owner has asked it to stop.
void throw_if_cancelled(const StopSignal& stop);

// The addresses the run connects to: those the caller resolved (and its allowlist checked), or
// the host resolved here when the caller did not. Throws ProbeFailure (kUnreachable).
std::vector<IpAddress> addresses_to_connect(const std::string& host, const std::string& port,
                                            const RunOptions& options);

struct Greeting {
  ControlChannel channel;
  protocol::Hello hello;
};

// Connects and exchanges Hellos, and returns once the responder has proved the shared secret
// (when `auth` has one): the one handshake of a probe run, a verification case and a mesh
// address request. A responder of another protocol version is refused by the codec, which reads
// no frame of another version. A responder busy with another run says so
// at once; that run often ends within moments (its side may still be releasing its resources
// after our previous run), so ask again, backing off, until the deadline.
// `gate`: this side's port gate as held for the run (RunOptions::gate), let go between the tries
// so that a busy responder waiting for this side's responder is served meanwhile; null: none.
Greeting greet(const std::string& host, const std::string& port,
               const std::vector<IpAddress>& addresses,
               std::chrono::steady_clock::time_point deadline, const peer_auth::InitiatorAuth& auth,
               const StopSignal& stop, ProbeGate::Held* gate = nullptr);

}  // namespace ibprobe::probes

// The initiator's side of the mesh address exchange: Hellos as for a probe run, then a
// MeshAddressRequest instead of a ProbeRequest. Nothing is allocated on either side.
#include "control_channel.h"
#include "ibprobe/mesh_pinger.h"
#include "peer_auth.h"
#include "run_common.h"

namespace ibprobe::probes {

std::expected<MeshEndpoint, Error> fetch_mesh_endpoint(
    const std::string& host, const std::string& port, const std::string& shared_secret,
    std::chrono::steady_clock::time_point deadline) {
  try {
    const peer_auth::InitiatorAuth auth(shared_secret);
    // A responder busy with a run, or still closing the last exchange, says so at once: greet
    // asks again until the deadline.
    const StopSignal never_stopped{std::stop_token{}};
    auto greeting =
        greet(host, port, ControlChannel::resolve(host, port), deadline, auth, never_stopped);
    auto& channel = greeting.channel;
    const auto& hello = greeting.hello;
    channel.send(protocol::MeshAddressRequest{auth.mesh_authenticator(hello)}, deadline);
    const auto address = channel.expect<protocol::MeshAddress>(deadline, "the mesh address");
    return MeshEndpoint{address.gid, address.lid, address.qpn, address.qkey, address.gid_family};
  } catch (...) {
    // The exchange's failures are thrown as a run's are; the library hands them out as values.
    return std::unexpected(current_exception_as_error());
  }
}

}  // namespace ibprobe::probes

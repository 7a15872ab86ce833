#include "run_common.h"

#include <algorithm>
#include <random>
#include <thread>

#include "ibprobe/counter_snapshot.h"

namespace ibprobe::probes {

CounterSnapshot snapshot_after_lifespan(const LocalPort& local) {
  auto snapshot = collectors::snapshot_port(local.sysfs_root, local.device, local.port);
  if (snapshot.hw_counters_lifespan.count() > 0) {
    std::this_thread::sleep_for(snapshot.hw_counters_lifespan);
    snapshot = collectors::snapshot_port(local.sysfs_root, local.device, local.port);
  }
  return std::move(snapshot.counters);
}

void throw_if_cancelled(const StopSignal& stop) {
  if (stop.stop_requested()) {
    throw ProbeFailure("the probe was cancelled", FailureKind::kCancelled);
  }
}

std::vector<IpAddress> addresses_to_connect(const std::string& host, const std::string& port,
                                            const RunOptions& options) {
  if (!options.resolved) return ControlChannel::resolve(host, port);
  if (!*options.resolved) {
    throw ProbeFailure("cannot resolve " + host + ":" + port + ": " + options.resolved->error(),
                       FailureKind::kUnreachable);
  }
  return **options.resolved;
}

Greeting greet(const std::string& host, const std::string& port,
               const std::vector<IpAddress>& addresses,
               std::chrono::steady_clock::time_point deadline, const peer_auth::InitiatorAuth& auth,
               const StopSignal& stop, ProbeGate::Held* gate) {
  auto backoff = std::chrono::milliseconds(50);
  while (true) {
    auto channel = ControlChannel::connect(host, port, addresses, deadline, &stop);
    channel.send(protocol::Hello{protocol::kProtocolVersion, kSoftwareVersion, auth.challenge(),
                                 std::nullopt},
                 deadline);
    auto message = channel.receive(deadline);
    if (auto* hello = std::get_if<protocol::Hello>(&message)) {
      auth.verify(*hello, channel.peer());
      return Greeting{std::move(channel), std::move(*hello)};
    }
    const auto* error = std::get_if<protocol::Error>(&message);
    if (!error || error->code != protocol::ErrorCode::kBusy ||
        std::chrono::steady_clock::now() + backoff > deadline) {
      channel.fail_unexpected(message, "the responder's hello");
    }
    if (gate) {
      // Two initiators probing each other step aside together; a pause of its own length for
      // each (backoff to twice that) lets the one that is back first be served by the other,
      // which is still away.
      thread_local std::minstd_rand jitter{std::random_device{}()};
      const auto pause =
          backoff + std::chrono::milliseconds(
                        std::uniform_int_distribution<std::int64_t>(0, backoff.count())(jitter));
      if (!gate->step_aside(pause, stop, deadline)) {
        throw_if_cancelled(stop);
        throw ProbeFailure(
            "this side's port stayed busy with a peer's probe until the deadline, "
            "after " +
                channel.peer() + " answered busy",
            FailureKind::kTimeout);
      }
      throw_if_cancelled(stop);
    } else if (stop.wait_for(backoff)) {
      throw_if_cancelled(stop);
    }
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

}  // namespace ibprobe::probes

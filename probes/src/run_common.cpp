#include "run_common.h"

#include <algorithm>
#include <thread>

#include "ibprobe/counter_snapshot.h"

namespace ibprobe::probes {

CounterSnapshot snapshot_after_lifespan(const LocalPort& local) {
  auto snapshot = collectors::snapshot_port(local.sysfs_root, local.device, local.port);
  if (snapshot.hw_counters_lifespan.count() > 0) {
    std::this_thread::sleep_for(snapshot.hw_counters_lifespan);
    snapshot = collectors::snapshot_port(local.sysfs_root, local.device, local.port);
  }
  CounterSnapshot out;
  for (const auto& [name, reading] : snapshot.counters) {
    out.emplace(name, CounterSample{reading.value, reading.width_bits, reading.scale,
                                    reading.error_class, std::string(reading.counter_class)});
  }
  return out;
}

void throw_if_cancelled(const RunOptions& options) {
  if (options.cancel && options.cancel->load()) {
    throw ProbeFailure("the probe was cancelled: this exporter is shutting down",
                       FailureKind::kCancelled);
  }
}

Greeting greet(const std::string& host, const std::string& port,
               std::chrono::steady_clock::time_point deadline, const peer_auth::InitiatorAuth& auth,
               const RunOptions& options) {
  auto backoff = std::chrono::milliseconds(50);
  while (true) {
    auto channel = ControlChannel::connect(host, port, deadline);
    channel.send(protocol::Hello{protocol::kProtocolVersion, kSoftwareVersion, auth.challenge(),
                                 std::nullopt},
                 deadline);
    auto message = channel.receive(deadline);
    if (auto* hello = std::get_if<protocol::Hello>(&message)) {
      return Greeting{std::move(channel), std::move(*hello)};
    }
    const auto* error = std::get_if<protocol::Error>(&message);
    if (!error || error->code != protocol::ErrorCode::kBusy ||
        std::chrono::steady_clock::now() + backoff > deadline) {
      channel.fail_unexpected(message, "the responder's hello");
    }
    throw_if_cancelled(options);
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

}  // namespace ibprobe::probes

#include "run_common.h"

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

}  // namespace ibprobe::probes

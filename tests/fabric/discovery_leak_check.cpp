// Heap bytes in use (glibc's mallinfo2, every arena) after repeated discoveries on the simulated
// fabric: discovering in this process (libibnetdisc directly) against the exporter's way (the
// Fabric, each discovery in a child process of the exporter's executable). Prints one JSON line;
// fabric_leak_test.py judges the figures. Run under ibsim-run's preload.
// Usage: discovery_leak_check EXPORTER CHILD_DISCOVERIES IN_PROCESS_DISCOVERIES
#include <malloc.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "ibprobe/fabric.h"
#include "ibprobe/fabric_discovery.h"

namespace {

using namespace ibprobe::fabric;

long long heap_in_use() {
  return static_cast<long long>(mallinfo2().uordblks);
}

}  // namespace

int main(int argc, char** argv) {
  // Stdout is the JSON line; the library's log goes where the exporter's goes.
  spdlog::set_default_logger(spdlog::stderr_logger_mt("leak_check"));
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s EXPORTER CHILD_DISCOVERIES IN_PROCESS_DISCOVERIES\n", argv[0]);
    return 2;
  }
  const int child_discoveries = std::atoi(argv[2]);
  // At most about 14 on ibsim (see below).
  const int in_process_discoveries = std::atoi(argv[3]);

  long long child_growth = 0;
  {
    // Closed before the in-process discoveries: on ibsim a process opens its umad port about 15
    // times at most (the preload's agent table), and the Fabric holds one.
    FabricOptions options;
    options.discovery_executable = argv[1];
    options.discovery_interval = std::chrono::hours(1);
    auto opened = Fabric::open(options);
    if (!opened) {
      std::fprintf(stderr, "%s\n", opened.error().message.c_str());
      return 1;
    }
    Fabric& fabric = **opened;
    // The first discoveries allocate what stays (the model, the link history, the discovery
    // thread's malloc caches).
    for (int i = 0; i < 5; ++i) {
      if (!fabric.rediscover()) {
        std::fprintf(stderr, "discovery through the exporter failed\n");
        return 1;
      }
    }
    const long long before = heap_in_use();
    for (int i = 0; i < child_discoveries; ++i) {
      if (!fabric.rediscover()) {
        std::fprintf(stderr, "discovery through the exporter failed\n");
        return 1;
      }
    }
    child_growth = heap_in_use() - before;
  }

  const DiscoveryOptions in_process{};
  std::size_t switch_ports = 0;
  const auto first = discover_fabric(in_process);
  if (!first) {
    std::fprintf(stderr, "%s\n", first.error().message.c_str());
    return 1;
  }
  for (const auto& node : first->model.nodes) {
    if (node.type == FabricNodeType::kSwitch) switch_ports += node.ports.size() + 1;  // port 0
  }
  const long long in_process_before = heap_in_use();
  for (int i = 0; i < in_process_discoveries; ++i) {
    if (!discover_fabric(in_process)) {
      std::fprintf(stderr, "in-process discovery failed\n");
      return 1;
    }
  }
  const long long in_process_after = heap_in_use();

  std::printf(
      "{\"child_discoveries\": %d, \"in_process_discoveries\": %d, \"switch_ports\": %zu, "
      "\"child_growth_bytes\": %lld, \"in_process_growth_bytes\": %lld}\n",
      child_discoveries, in_process_discoveries, switch_ports, child_growth,
      in_process_after - in_process_before);
  return 0;
}

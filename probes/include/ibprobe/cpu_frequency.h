// Whether the cores a run is pinned to run at full speed. perftest warns (unless -F) when the
// cores' "cpu MHz" in /proc/cpuinfo differ by more than 2 %, since a core that scales its
// frequency during a run stretches every latency it measures. Here the same question is asked of
// each core's cpufreq policy in sysfs: its governor, and its current frequency against the
// frequency it should hold.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace ibprobe::probes {

struct CpuFrequencyCheck {
  // False where the kernel has no cpufreq policy for these cores (a VM, a kernel without a
  // scaling driver): nothing scales, and nothing can be checked.
  bool applicable = false;
  bool passed = false;
  std::string detail;
};

// The cores `cpus` (numbers as in <sysfs_root>/devices/system/cpu/cpuN) pass when each one's
// scaling_governor is "performance" and its scaling_cur_freq is at least 98 % of its guaranteed
// frequency: base_frequency where the driver gives one (intel_pstate; turbo above it is
// welcome), else cpuinfo_max_freq. A core without a cpufreq directory is left out; when no core
// has one, the check does not apply. The detail names each failing core and why.
CpuFrequencyCheck check_cpu_frequency(const std::filesystem::path& sysfs_root,
                                      const std::vector<unsigned>& cpus);

// The cores the calling thread may run on (its affinity mask, after any NUMA binding).
std::vector<unsigned> cpus_of_this_thread();

}  // namespace ibprobe::probes

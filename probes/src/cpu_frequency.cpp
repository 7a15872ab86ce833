#include "ibprobe/cpu_frequency.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <system_error>

namespace ibprobe::probes {
namespace {

std::optional<std::string> read_word(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string word;
  if (!(in >> word)) return std::nullopt;
  return word;
}

std::optional<unsigned long> read_khz(const std::filesystem::path& file) {
  const auto word = read_word(file);
  if (!word || word->empty() || word->find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  try {
    return std::stoul(*word);
  } catch (const std::out_of_range&) {
    return std::nullopt;
  }
}

std::string mhz(unsigned long khz) {
  return std::to_string((khz + 500) / 1000) + " MHz";
}

// "0-3,6": the cores of a summary, in the order given (affinity masks come sorted).
std::string ranges(const std::vector<unsigned>& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

constexpr std::size_t kProblemsNamed = 4;

}  // namespace

CpuFrequencyCheck check_cpu_frequency(const std::filesystem::path& sysfs_root,
                                      const std::vector<unsigned>& cpus) {
  const auto cpu_dir = sysfs_root / "devices" / "system" / "cpu";
  CpuFrequencyCheck check;
  std::vector<std::string> problems;
  std::vector<unsigned> checked;
  unsigned long lowest = std::numeric_limits<unsigned long>::max(), highest = 0;
  for (const unsigned cpu : cpus) {
    const auto dir = cpu_dir / ("cpu" + std::to_string(cpu)) / "cpufreq";
    std::error_code error;
    if (!std::filesystem::is_directory(dir, error)) continue;
    checked.push_back(cpu);
    const std::string core = "cpu " + std::to_string(cpu);
    const auto governor = read_word(dir / "scaling_governor");
    if (!governor) {
      problems.push_back(core + ": " + (dir / "scaling_governor").string() + " unreadable");
    } else if (*governor != "performance") {
      problems.push_back(core + ": governor " + *governor + ", not performance");
    }
    const auto current = read_khz(dir / "scaling_cur_freq");
    std::string guaranteed_name = "base frequency";
    auto guaranteed = read_khz(dir / "base_frequency");
    if (!guaranteed) {
      guaranteed_name = "maximum";
      guaranteed = read_khz(dir / "cpuinfo_max_freq");
    }
    if (!current || !guaranteed || *guaranteed == 0) {
      problems.push_back(core + ": no frequency in scaling_cur_freq and cpuinfo_max_freq of " +
                         dir.string());
      continue;
    }
    if (*current * 100 < *guaranteed * 98) {
      problems.push_back(core + ": " + mhz(*current) + ", under its " + guaranteed_name + " " +
                         mhz(*guaranteed));
    }
    lowest = std::min(lowest, *current);
    highest = std::max(highest, *current);
  }
  if (checked.empty()) {
    check.detail = "no cpufreq policy for cpu " + ranges(cpus) + " in " + cpu_dir.string() +
                   ": the kernel scales no frequency here (as in a VM)";
    return check;
  }
  check.applicable = true;
  check.passed = problems.empty();
  if (check.passed) {
    check.detail = "cpu " + ranges(checked) + ": governor performance, " + mhz(lowest);
    if (highest != lowest) check.detail += " to " + mhz(highest);
    return check;
  }
  for (std::size_t i = 0; i < problems.size() && i < kProblemsNamed; ++i) {
    if (i > 0) check.detail += "; ";
    check.detail += problems[i];
  }
  if (problems.size() > kProblemsNamed) {
    check.detail += "; and " + std::to_string(problems.size() - kProblemsNamed) + " more";
  }
  return check;
}

std::vector<unsigned> cpus_of_this_thread() {
  const long configured = sysconf(_SC_NPROCESSORS_CONF);
  // Masks of CPU_SETSIZE cores each, enough for every core the machine has.
  std::vector<cpu_set_t> masks(
      static_cast<std::size_t>(std::max(configured, 1L) - 1) / CPU_SETSIZE + 1);
  const std::size_t size = masks.size() * sizeof(cpu_set_t);
  CPU_ZERO_S(size, masks.data());
  std::vector<unsigned> cpus;
  if (sched_getaffinity(0, size, masks.data()) != 0) return cpus;
  const std::size_t count = masks.size() * CPU_SETSIZE;
  for (std::size_t cpu = 0; cpu < count; ++cpu) {
    if (CPU_ISSET_S(cpu, size, masks.data())) cpus.push_back(static_cast<unsigned>(cpu));
  }
  return cpus;
}

}  // namespace ibprobe::probes

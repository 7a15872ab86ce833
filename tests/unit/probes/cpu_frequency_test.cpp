// The cpu_frequency pre-flight check against cpufreq trees as the kernel lays them out: the
// acpi-cpufreq driver (cpuinfo_max_freq only) and intel_pstate (base_frequency, turbo above it).
#include "ibprobe/cpu_frequency.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <filesystem>
#include <string>

#include "sysfs_fixture.h"

namespace ibprobe::probes {
namespace {

class CpuFrequency : public ::testing::Test {
 protected:
  // One core's policy: governor, current and maximum frequency in kHz, and base_frequency where
  // the driver writes one (0: none).
  void core(unsigned cpu, const std::string& governor, unsigned long current_khz,
            unsigned long max_khz, unsigned long base_khz = 0) {
    const auto dir = policy(cpu);
    tree_.write(dir / "scaling_governor", governor);
    tree_.write(dir / "scaling_cur_freq", std::to_string(current_khz));
    tree_.write(dir / "cpuinfo_max_freq", std::to_string(max_khz));
    if (base_khz != 0) tree_.write(dir / "base_frequency", std::to_string(base_khz));
  }
  // A core's cpufreq directory, relative to the tree.
  static std::filesystem::path policy(unsigned cpu) {
    return std::filesystem::path("devices/system/cpu") / ("cpu" + std::to_string(cpu)) / "cpufreq";
  }

  ibprobe::testing::SysfsTree tree_;
  const std::filesystem::path& root_ = tree_.root();
};

TEST_F(CpuFrequency, PerformanceGovernorAtMaximumPasses) {
  core(0, "performance", 3000000, 3000000);
  core(1, "performance", 2990000, 3000000);
  core(2, "performance", 3000000, 3000000);
  const auto check = check_cpu_frequency(root_, {0, 1, 2});
  EXPECT_TRUE(check.applicable);
  EXPECT_TRUE(check.passed);
  EXPECT_EQ(check.detail, "cpu 0-2: governor performance, 2990 MHz to 3000 MHz");
}

TEST_F(CpuFrequency, AnotherGovernorFailsNamingTheCore) {
  core(0, "performance", 3000000, 3000000);
  core(1, "powersave", 3000000, 3000000);
  const auto check = check_cpu_frequency(root_, {0, 1});
  EXPECT_TRUE(check.applicable);
  EXPECT_FALSE(check.passed);
  EXPECT_EQ(check.detail, "cpu 1: governor powersave, not performance");
}

TEST_F(CpuFrequency, ACoreBelowItsMaximumFails) {
  // perftest's tolerance: 2 %.
  core(4, "performance", 1200000, 3300000);
  core(5, "performance", 3234000, 3300000);
  core(6, "performance", 3233000, 3300000);
  const auto check = check_cpu_frequency(root_, {4, 5, 6});
  EXPECT_FALSE(check.passed);
  EXPECT_EQ(check.detail,
            "cpu 4: 1200 MHz, under its maximum 3300 MHz; cpu 6: 3233 MHz, under its maximum "
            "3300 MHz");
}

TEST_F(CpuFrequency, BaseFrequencyIsTheBarWhereTheDriverGivesOne) {
  // intel_pstate: cpuinfo_max_freq is the single-core turbo, which all cores never hold at once.
  core(0, "performance", 2800000, 4000000, 2600000);
  EXPECT_TRUE(check_cpu_frequency(root_, {0}).passed);
  core(1, "performance", 1800000, 4000000, 2600000);
  const auto check = check_cpu_frequency(root_, {0, 1});
  EXPECT_FALSE(check.passed);
  EXPECT_EQ(check.detail, "cpu 1: 1800 MHz, under its base frequency 2600 MHz");
}

TEST_F(CpuFrequency, OnlyTheGivenCoresCount) {
  // The run is pinned to 2 and 3 (its NUMA node); a slow core elsewhere is not its concern.
  core(0, "powersave", 800000, 3000000);
  core(2, "performance", 3000000, 3000000);
  core(3, "performance", 3000000, 3000000);
  EXPECT_TRUE(check_cpu_frequency(root_, {2, 3}).passed);
}

TEST_F(CpuFrequency, NoPolicyMeansNotApplicable) {
  // A VM: cpu directories without cpufreq.
  std::filesystem::create_directories(root_ / policy(0).parent_path());
  const auto check = check_cpu_frequency(root_, {0, 1});
  EXPECT_FALSE(check.applicable);
  EXPECT_FALSE(check.passed);
  EXPECT_EQ(check.detail, "no cpufreq policy for cpu 0-1 in " +
                              (root_ / "devices/system/cpu").string() +
                              ": the kernel scales no frequency here (as in a VM)");
}

TEST_F(CpuFrequency, UnreadableFilesFailWithTheirPath) {
  core(0, "performance", 3000000, 3000000);
  const auto dir = root_ / policy(0);
  tree_.write(policy(0) / "scaling_cur_freq", "<unsupported>");
  std::filesystem::remove(dir / "scaling_governor");
  const auto check = check_cpu_frequency(root_, {0});
  EXPECT_TRUE(check.applicable);
  EXPECT_FALSE(check.passed);
  EXPECT_EQ(check.detail, "cpu 0: " + (dir / "scaling_governor").string() +
                              " unreadable; cpu 0: no frequency in scaling_cur_freq and "
                              "cpuinfo_max_freq of " +
                              dir.string());
}

TEST_F(CpuFrequency, ManyFailingCoresAreCounted) {
  for (unsigned cpu = 0; cpu < 7; ++cpu) core(cpu, "ondemand", 3000000, 3000000);
  const auto check = check_cpu_frequency(root_, {0, 1, 2, 3, 4, 5, 6});
  EXPECT_FALSE(check.passed);
  EXPECT_EQ(check.detail,
            "cpu 0: governor ondemand, not performance; cpu 1: governor ondemand, not "
            "performance; cpu 2: governor ondemand, not performance; cpu 3: governor ondemand, "
            "not performance; and 3 more");
}

TEST(CpusOfThisThread, FollowTheAffinityMask) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  unsigned first = 0;
  while (!CPU_ISSET(first, &saved)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  const auto pinned = cpus_of_this_thread();
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  EXPECT_EQ(pinned, std::vector<unsigned>{first});
  EXPECT_EQ(cpus_of_this_thread().size(), static_cast<std::size_t>(CPU_COUNT(&saved)));
}

}  // namespace
}  // namespace ibprobe::probes

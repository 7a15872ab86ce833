// The probe's master_sm pre-flight check, asked from a simulated fabric's port (the probe's
// verbs side cannot run there; this is the part that talks to the SM). Prints one JSON line.
// Run under ibsim-run's preload.
// Usage: master_sm_check DEVICE PORT SM_LID   (DEVICE "" and PORT 0: the first port)
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "ibprobe/master_sm.h"

int main(int argc, char** argv) {
  spdlog::set_default_logger(spdlog::stderr_logger_mt("master_sm_check"));
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s DEVICE PORT SM_LID\n", argv[0]);
    return 2;
  }
  const auto check = ibprobe::probes::check_master_sm(
      argv[1], std::atoi(argv[2]), static_cast<std::uint16_t>(std::atoi(argv[3])),
      std::chrono::milliseconds(200), 1);
  std::puts(nlohmann::json{
      {"applicable", check.applicable}, {"passed", check.passed}, {"detail", check.detail}}
                .dump()
                .c_str());
  return 0;
}

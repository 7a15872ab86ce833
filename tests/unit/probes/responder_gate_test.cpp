// One probe at a time per port, enforced on the responder side: an initiator that arrives while
// the port's gate is held (a run in progress, ours or a peer's) is told "busy" at once, with the
// Error frame intact, rather than left to time out in the listen backlog. The initiator asks
// again until its setup deadline, so a run that is just ending does not fail the next one.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>

#include "ibprobe/verbs_probe.h"

namespace ibprobe::probes {
namespace {

constexpr const char* kMissingDevice = "no_such_rdma_device";

struct Attempt {
  std::string kind;
  std::string what;
  double seconds = 0;
};

Attempt probe(const Responder& responder) {
  auto spec = default_spec(Operation::kWrite, TestKind::kLatency);
  spec.timeout_seconds = 2;  // also the setup deadline
  const auto start = std::chrono::steady_clock::now();
  Attempt attempt{"none", "the run succeeded"};
  try {
    run_probe(LocalPort{kMissingDevice, 1}, "127.0.0.1", std::to_string(responder.port()), spec);
  } catch (const ProbeFailure& e) {
    attempt = {std::string(to_string(e.kind())), e.what()};
  }
  attempt.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return attempt;
}

bool failed_on_the_device(const Attempt& attempt) {
  return attempt.what.find(kMissingDevice) != std::string::npos ||
         attempt.what.find("ibv_get_device_list") != std::string::npos;
}

TEST(ResponderGate, BusyPortIsRefusedWithTheReasonUntilTheSetupDeadline) {
  auto gate = std::make_shared<ProbeGate>();
  Responder responder("127.0.0.1", "0", LocalPort{kMissingDevice, 1},
                      ResponderOptions{Limits{}, "", gate});
  ASSERT_TRUE(gate->try_enter());  // a run of our own holds the port
  const auto attempt = probe(responder);
  EXPECT_EQ(attempt.kind, "rejected") << attempt.what;
  EXPECT_NE(attempt.what.find("busy: another probe is running on no_such_rdma_device port 1"),
            std::string::npos)
      << attempt.what;
  // Asked again while the deadline allowed, then gave up at it rather than hanging on.
  EXPECT_GT(attempt.seconds, 1.0);
  EXPECT_LT(attempt.seconds, 3.0);
  gate->leave();
}

TEST(ResponderGate, RunProceedsOnceThePortIsFree) {
  auto gate = std::make_shared<ProbeGate>();
  Responder responder("127.0.0.1", "0", LocalPort{kMissingDevice, 1},
                      ResponderOptions{Limits{}, "", gate});
  ASSERT_TRUE(gate->try_enter());
  std::thread release([&gate] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    gate->leave();
  });
  // Busy at first; once the gate is free the run gets past it and fails only on the device.
  const auto attempt = probe(responder);
  release.join();
  EXPECT_EQ(attempt.what.find("busy"), std::string::npos) << attempt.what;
  EXPECT_TRUE(failed_on_the_device(attempt)) << attempt.kind << ": " << attempt.what;
  // The responder left the gate when that run ended.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  bool entered = false;
  while (!(entered = gate->try_enter()) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(entered);
}

}  // namespace
}  // namespace ibprobe::probes

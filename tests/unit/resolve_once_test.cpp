// A target's name is resolved once: the addresses the allowlist checks are the addresses the
// run connects to, whatever the name resolves to later (DNS rebinding). The resolver answers
// 127.0.0.1, inside the allowlist, the first time and 127.0.0.2 after; a listener on each
// address, on the same port, tells where the real initiator connected.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "exporter_test_helpers.h"
#include "probe_service.h"

namespace ibprobe::testing {
namespace {

using namespace std::chrono_literals;

// Counts the connections it accepts, closing each at once.
class CountingListener {
 public:
  // Port 0: any free port.
  CountingListener(std::uint32_t address, int port)
      : listener_(address, port, [this](int connection) {
          ++accepted_;
          ::close(connection);
        }) {}
  bool listening() const { return listener_.listening(); }
  int port() const { return listener_.port(); }
  int accepted() const { return accepted_; }

 private:
  std::atomic<int> accepted_ = 0;
  AcceptingListener listener_;
};

probes::IpAddress mapped(std::uint8_t last) {
  return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, last};
}

TEST(ResolveOnce, TheAllowlistAndTheConnectSeeTheSameAddresses) {
  std::unique_ptr<CountingListener> allowed, rebound;
  // The same port on both addresses; another process may hold it on 127.0.0.2, so try again.
  for (int attempt = 0; attempt < 20 && !(rebound && rebound->listening()); ++attempt) {
    allowed = std::make_unique<CountingListener>(0x7f000001, 0);
    rebound = std::make_unique<CountingListener>(0x7f000002, allowed->port());
  }
  ASSERT_TRUE(rebound && rebound->listening()) << "no port free on both 127.0.0.1 and 127.0.0.2";

  const auto config_path = std::filesystem::temp_directory_path() /
                           ("resolve_once_" + std::to_string(::getpid()) + ".yml");
  std::ofstream(config_path) << "modules:\n  bw:\n    kind: write_bw\n    timeout: 5s\n"
                             << "allowed_targets:\n  - 127.0.0.1/32\n";
  std::atomic<int> resolutions = 0;
  exporter::ProbeService::Options options;
  options.local = probes::LocalPort{"absent_device", 1, "/nonexistent"};
  options.config_file = config_path.string();
  options.resolve =
      [&resolutions](
          const std::string&) -> std::expected<std::vector<probes::IpAddress>, std::string> {
    return std::vector{mapped(++resolutions == 1 ? 1 : 2)};
  };
  exporter::ProbeService service(std::move(options));
  std::filesystem::remove(config_path);

  const auto submitted =
      service.submit({.target = "peer.example.invalid:" + std::to_string(allowed->port()),
                      .module = "bw",
                      .timeout_seconds = std::nullopt});
  ASSERT_TRUE(submitted.has_value());
  const auto run = service.get(submitted.value(), 20s);
  ASSERT_TRUE(run);
  ASSERT_EQ(run->state, exporter::RunState::kFailed);  // the listener hangs up at once
  EXPECT_EQ(resolutions, 1) << "the name was resolved more than once";
  EXPECT_EQ(allowed->accepted(), 1) << run->failure;
  EXPECT_EQ(rebound->accepted(), 0) << "the run connected to an address the allowlist never saw";
}

}  // namespace
}  // namespace ibprobe::testing

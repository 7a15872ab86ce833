// The request path under a hanging peer: waiting requests park on workers of their own, so
// /metrics keeps answering; a client that disconnects gives its slot back at once; shutdown
// answers every waiter. A hanging peer is a TCP listener that accepts and never answers, and
// the probes are real runs of the initiator against it.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collect_helpers.h"
#include "exporter_test_helpers.h"
#include "hold.h"
#include "http_client.h"
#include "ibprobe/exporter.h"
#include "probe_api.h"
#include "probe_service.h"
#include "sysfs_fixture.h"

namespace ibprobe::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Accepts every connection and never says a word.
class HangingPeer {
 public:
  HangingPeer()
      : listener_(INADDR_LOOPBACK, 0, [this](int connection) {
          std::lock_guard lock(mutex_);
          accepted_.push_back(connection);
        }) {
    if (!listener_.listening()) throw std::runtime_error("hanging peer cannot listen");
  }
  ~HangingPeer() {
    listener_.stop();
    for (const int fd : accepted_) ::close(fd);
  }
  int port() const { return listener_.port(); }
  std::size_t accepted() {
    std::lock_guard lock(mutex_);
    return accepted_.size();
  }

 private:
  std::mutex mutex_;
  std::vector<int> accepted_;
  AcceptingListener listener_;
};

// A client connection that sends its request and waits for the answer, or hangs up first.
class WaitingClient {
 public:
  WaitingClient(int port, const std::string& path) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      throw std::runtime_error("cannot connect to the exporter");
    }
    const std::string request =
        "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    if (::send(fd_, request.data(), request.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(request.size())) {
      throw std::runtime_error("cannot send the request");
    }
  }
  ~WaitingClient() { hang_up(); }
  void hang_up() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // Everything the server sent once it closed the connection, or what came within `bound`.
  std::string answer(std::chrono::milliseconds bound) {
    std::string raw;
    const auto deadline = Clock::now() + bound;
    char buffer[16384];
    while (Clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 10) <= 0) continue;
      const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      raw.append(buffer, static_cast<std::size_t>(n));
    }
    return raw;
  }

 private:
  int fd_ = -1;
};

class WaitingRequestsTest : public ::testing::Test {
 protected:
  static constexpr std::size_t kWaiters = 64;
  static constexpr std::size_t kScrapes = 16;
  static constexpr std::size_t kMaxWaiting = kWaiters + kScrapes;
  static constexpr int kHttpThreads = 4;

  WaitingRequestsTest() {
    tree_.add(mlx5_ib_device("mlx5_0", 2, 0));
    scraper_ = scraper_over(tree_.root());
    std::ofstream(config_path_) << "modules:\n  hang:\n    kind: write_bw\n    timeout: 60s\n"
                                << "scheduler:\n  queue_length: 32\n";
    exporter::ProbeService::Options service_options;
    // No such device: a run that got past the handshake would fail, but none gets there.
    service_options.local = probes::LocalPort{"absent_device", 1, tree_.root()};
    service_options.config_file = config_path_;
    service_ = std::make_unique<exporter::ProbeService>(std::move(service_options));
    api_ = std::make_unique<exporter::ProbeApi>(*service_, kMaxWaiting);
    routes_ = std::make_unique<exporter::Routes>(config_, *scraper_, api_.get());
    server_ = std::make_unique<exporter::HttpServer>(
        "127.0.0.1:0", kHttpThreads + static_cast<int>(kMaxWaiting), *routes_);
  }
  ~WaitingRequestsTest() override {
    // In the order of their references: the server uses the routes and the API, the API the
    // service (its alert receiver's thread among them).
    server_.reset();
    routes_.reset();
    api_.reset();
    service_.reset();
    std::filesystem::remove(config_path_);
  }

  std::string target() const { return "127.0.0.1:" + std::to_string(peer_.port()); }

  HangingPeer peer_;
  SysfsTree tree_;
  std::string config_path_ = (std::filesystem::temp_directory_path() /
                              ("waiting_requests_" + std::to_string(::getpid()) + ".yml"))
                                 .string();
  exporter::Config config_;
  std::unique_ptr<collectors::Scraper> scraper_;
  std::unique_ptr<exporter::ProbeService> service_;
  std::unique_ptr<exporter::ProbeApi> api_;
  std::unique_ptr<exporter::Routes> routes_;
  std::unique_ptr<exporter::HttpServer> server_;
};

double percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  const auto index =
      static_cast<std::size_t>(std::ceil(p * static_cast<double>(values.size()))) - 1;
  return values[std::min(index, values.size() - 1)];
}

TEST_F(WaitingRequestsTest, MetricsAnswerWhileProbesHangAndWaitersComeAndGo) {
  const int port = server_->port();
  const std::string body = R"({"target":")" + target() + R"(","module":"hang"})";
  const auto started =
      http_request(port,
                   "POST /api/v1/probes HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                   "Content-Type: application/json\r\nContent-Length: " +
                       std::to_string(body.size()) + "\r\n\r\n" + body);
  ASSERT_EQ(started.status, 202) << started.body;
  ASSERT_TRUE(eventually([&] { return peer_.accepted() == 1; })) << "the probe never connected";

  std::vector<std::unique_ptr<WaitingClient>> waiters;
  for (std::size_t i = 0; i < kWaiters; ++i) {
    waiters.push_back(std::make_unique<WaitingClient>(port, "/api/v1/probes/1?wait=120s"));
  }
  std::vector<std::unique_ptr<WaitingClient>> scrapes;
  for (std::size_t i = 0; i < kScrapes; ++i) {
    scrapes.push_back(
        std::make_unique<WaitingClient>(port, "/probe?target=" + target() + "&module=hang"));
  }
  ASSERT_TRUE(eventually([&] { return api_->waiting() == kMaxWaiting; }))
      << api_->waiting() << " of " << kMaxWaiting << " requests are waiting";

  // 100 scrapes of /metrics, one after the other, while every waiting slot is taken.
  std::vector<double> latencies_ms;
  int ok = 0;
  for (int i = 0; i < 100; ++i) {
    const auto start = Clock::now();
    const auto response = http_get(port, "/metrics");
    latencies_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    if (response.status == 200 && response.body.find("rdma_port_") != std::string::npos) ++ok;
  }
  const double p50 = percentile(latencies_ms, 0.5), p99 = percentile(latencies_ms, 0.99),
               worst = percentile(latencies_ms, 1.0);
  std::printf(
      "/metrics under %zu waiting requests: %d of 100 answered 200; p50 %.1f ms, p99 %.1f "
      "ms, max %.1f ms\n",
      api_->waiting(), ok, p50, p99, worst);
  EXPECT_EQ(ok, 100);
  EXPECT_LT(p99, 50.0);

  // One more waiter finds no slot and is told when to come back, at once.
  const auto refused = http_get(port, "/api/v1/probes/1?wait=60s");
  EXPECT_EQ(refused.status, 503);
  EXPECT_NE(refused.head.find("Retry-After: 1"), std::string::npos) << refused.head;
  const auto refused_scrape = http_get(port, "/probe?target=" + target() + "&module=hang");
  EXPECT_EQ(refused_scrape.status, 503);

  // Clients that hang up give their slots back at once, and others take them.
  const auto hang_up = Clock::now();
  for (std::size_t i = 0; i < 16; ++i) waiters[i]->hang_up();
  ASSERT_TRUE(eventually([&] { return api_->waiting() == kMaxWaiting - 16; }, 5s))
      << api_->waiting() << " still waiting";
  std::printf("16 waiters hung up: their slots were free after %.1f ms\n",
              std::chrono::duration<double, std::milli>(Clock::now() - hang_up).count());
  for (std::size_t i = 0; i < 16; ++i) {
    waiters[i] = std::make_unique<WaitingClient>(port, "/api/v1/probes/1?wait=120s");
  }
  ASSERT_TRUE(eventually([&] { return api_->waiting() == kMaxWaiting; }));

  // Shutdown with the probe hanging: the run lets go at once and every waiter is answered.
  const auto stop = Clock::now();
  service_->shutdown();
  const double shutdown_ms = std::chrono::duration<double, std::milli>(Clock::now() - stop).count();
  std::printf("shutdown with a hanging probe and %zu waiters: %.1f ms\n", kMaxWaiting, shutdown_ms);
  EXPECT_LT(shutdown_ms, 1000.0);
  for (auto& waiter : waiters) {
    const auto answer = waiter->answer(5s);
    EXPECT_NE(answer.find("HTTP/1.1 200"), std::string::npos) << answer;
    EXPECT_NE(answer.find(R"("reason":"cancelled")"), std::string::npos) << answer;
  }
  for (auto& scrape : scrapes) {
    const auto answer = scrape->answer(5s);
    EXPECT_NE(answer.find("HTTP/1.1 200"), std::string::npos) << answer;
    EXPECT_NE(answer.find("probe_success 0"), std::string::npos) << answer;
  }
  EXPECT_TRUE(eventually([&] { return api_->waiting() == 0; }, 5s));
}

}  // namespace
}  // namespace ibprobe::testing

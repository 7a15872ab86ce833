#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "collect_helpers.h"
#include "http_client.h"
#include "ibprobe/exporter.h"
#include "sysfs_fixture.h"

namespace ibprobe::testing {
namespace {

class HttpServerTest : public ::testing::Test {
 protected:
  HttpServerTest() {
    tree_.add(mlx5_ib_device("mlx5_0", 2, 0));
    scraper_ = scraper_over(tree_.root());
    routes_ = std::make_unique<exporter::Routes>(config_, *scraper_);
    server_ = std::make_unique<exporter::HttpServer>("127.0.0.1:0", 4, *routes_);
  }

  SysfsTree tree_;
  exporter::Config config_;
  std::unique_ptr<collectors::Scraper> scraper_;
  std::unique_ptr<exporter::Routes> routes_;
  std::unique_ptr<exporter::HttpServer> server_;
};

TEST_F(HttpServerTest, ServesMetricsOverTheSocket) {
  const auto response = http_get(server_->port(), "/metrics");
  EXPECT_EQ(response.status, 200);
  EXPECT_NE(response.head.find("Content-Type: text/plain; version=0.0.4"), std::string::npos);
  EXPECT_NE(response.head.find("Content-Length: " + std::to_string(response.body.size())),
            std::string::npos);
  EXPECT_NE(response.body.find("rdma_port_errors_total{device=\"mlx5_0\",port=\"2\","
                               "counter=\"symbol_error\"}"),
            std::string::npos);
}

TEST_F(HttpServerTest, HeadHasNoBody) {
  const auto response = http_request(
      server_->port(), "HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(response.status, 200);
  EXPECT_TRUE(response.body.empty());
}

TEST_F(HttpServerTest, MalformedRequestsDoNotStopTheServer) {
  for (const std::string& garbage : std::vector<std::string>{
           "\r\n\r\n", "GARBAGE\r\n\r\n", "GET\r\n\r\n",
           "GET /metrics HTTP/9.9\r\nHost: x\r\nConnection: close\r\n\r\n",
           "GET /" + std::string(20000, 'a') + " HTTP/1.1\r\nConnection: close\r\n\r\n"}) {
    http_request(server_->port(), garbage);
  }
  EXPECT_EQ(http_get(server_->port(), "/-/healthy").status, 200);
  EXPECT_EQ(http_get(server_->port(), "/metrics?x=%zz").status, 200);
  EXPECT_EQ(http_get(server_->port(), "/../../etc/passwd").status, 404);
}

TEST_F(HttpServerTest, ConcurrentScrapesAllSucceed) {
  std::vector<std::thread> clients;
  std::atomic<int> ok = 0;
  for (int i = 0; i < 8; ++i) {
    clients.emplace_back([&] {
      for (int j = 0; j < 10; ++j) {
        if (http_get(server_->port(), "/metrics").status == 200) ++ok;
      }
    });
  }
  for (auto& c : clients) c.join();
  EXPECT_EQ(ok, 80);
}

// civetweb, left to itself, asks for the credentials of a password file at /.htpasswd on every
// request; the exporter's authorization is its web config's alone.
TEST_F(HttpServerTest, AStrayPasswordFileOnTheHostDemandsNoCredentials) {
  const std::filesystem::path stray = "/.htpasswd";
  if (std::filesystem::exists(stray)) GTEST_SKIP() << stray << " exists on this host";
  {
    std::ofstream file(stray);
    if (!file) GTEST_SKIP() << "cannot write " << stray << " (the test needs root)";
    file << "admin:ibprobe:0123456789abcdef0123456789abcdef\n";
  }
  struct Remove {
    std::filesystem::path path;
    ~Remove() { std::filesystem::remove(path); }
  } remove{stray};
  EXPECT_EQ(http_get(server_->port(), "/metrics").status, 200);
  EXPECT_EQ(http_get(server_->port(), "/-/healthy").status, 200);
}

TEST(HttpServer, BusyPortIsAClearError) {
  exporter::Config config;
  SysfsTree tree;
  collectors::Scraper scraper(collectors::Options{}, {});
  exporter::Routes routes(config, scraper);
  exporter::HttpServer first("127.0.0.1:0", 1, routes);
  try {
    exporter::HttpServer second("127.0.0.1:" + std::to_string(first.port()), 1, routes);
    FAIL() << "second bind succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot serve HTTP on 127.0.0.1:"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ibprobe::testing

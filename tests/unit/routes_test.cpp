#include <gtest/gtest.h>

#include "collect_helpers.h"
#include "exporter_test_helpers.h"
#include "ibprobe/exporter.h"
#include "sysfs_fixture.h"

namespace ibprobe::testing {
namespace {

using exporter::HttpRequest;

class RoutesTest : public OnePortExporterTest {
 protected:
  RoutesTest() { routes_ = std::make_unique<exporter::Routes>(config_, *scraper_); }

  exporter::HttpResponse get(const std::string& path) const {
    return routes_->handle(HttpRequest{"GET", path, "", {}, ""});
  }

  std::unique_ptr<exporter::Routes> routes_;
};

TEST_F(RoutesTest, MetricsInTextFormat) {
  const auto response = get("/metrics");
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.content_type, "text/plain; version=0.0.4; charset=utf-8");
  const auto expected_bytes =
      std::to_string(extended_port_counters(16 * 0 + 1).at("port_xmit_data") * 4);
  EXPECT_NE(response.body.find("# TYPE rdma_port_data_transmitted_bytes_total counter"),
            std::string::npos);
  EXPECT_NE(response.body.find("rdma_port_data_transmitted_bytes_total{device=\"mlx5_0\",port="
                               "\"1\"} " +
                               expected_bytes),
            std::string::npos)
      << response.body.substr(0, 2000);
  EXPECT_NE(response.body.find("ibprobe_build_info{"), std::string::npos);
  EXPECT_NE(response.body.find("ibprobe_scrape_collector_success{collector=\"port_counters\"} 1"),
            std::string::npos);
}

TEST_F(RoutesTest, HealthReadinessAndLanding) {
  EXPECT_EQ(get("/-/healthy").status, 200);
  EXPECT_EQ(get("/-/ready").status, 503);
  routes_->set_ready(true);
  EXPECT_EQ(get("/-/ready").status, 200);
  const auto landing = get("/");
  EXPECT_EQ(landing.status, 200);
  EXPECT_NE(landing.body.find("href=\"/metrics\""), std::string::npos);
}

TEST_F(RoutesTest, UnknownPathsAndMethods) {
  EXPECT_EQ(get("/nope").status, 404);
  EXPECT_EQ(get("/metrics/").status, 404);
  const auto post = routes_->handle(HttpRequest{"POST", "/metrics", "", {}, ""});
  EXPECT_EQ(post.status, 405);
  ASSERT_EQ(post.headers.size(), 1u);
  EXPECT_EQ(post.headers[0].first, "Allow");
}

TEST_F(RoutesTest, CustomTelemetryPath) {
  config_.telemetry_path = "/rdma";
  EXPECT_EQ(get("/rdma").status, 200);
  EXPECT_EQ(get("/metrics").status, 404);
}

}  // namespace
}  // namespace ibprobe::testing

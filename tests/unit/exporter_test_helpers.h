// Pieces the exporter's tests share: routes over a fake one-port tree, the probe configuration
// parsed with a failure that shows the YAML, and a TCP listener that stands in for a peer.
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "collect_helpers.h"
#include "ibprobe/exporter.h"
#include "probe_config.h"
#include "sysfs_fixture.h"

namespace ibprobe::testing {

// The exporter's configuration and scraper over a tree with one mlx5 port, for tests that build
// exporter::Routes on them.
class OnePortExporterTest : public ::testing::Test {
 protected:
  OnePortExporterTest() {
    tree_.add(mlx5_ib_device("mlx5_0", 1, 0));
    config_.telemetry_path = "/metrics";
    scraper_ = scraper_over(tree_.root(), "port_counters");
  }

  SysfsTree tree_;
  exporter::Config config_;
  std::unique_ptr<collectors::Scraper> scraper_;
};

// A configuration the test expects to be accepted; a refusal fails the test and yields an empty
// configuration.
inline exporter::ProbeConfig probe_config_ok(const std::string& yaml) {
  auto parsed = exporter::parse_probe_config(yaml);
  if (!parsed) {
    ADD_FAILURE() << "refused: " << parsed.error() << "\n" << yaml;
    return {};
  }
  return *std::move(parsed);
}

// Why a configuration the test expects to be refused is refused; accepting it fails the test.
inline std::string probe_config_error(const std::string& yaml) {
  auto parsed = exporter::parse_probe_config(yaml);
  if (parsed.has_value()) {
    ADD_FAILURE() << "accepted:\n" << yaml;
    return "";
  }
  return parsed.error();
}

// Listens on an IPv4 address and port (0: any free port) and hands every connection it accepts
// to `on_connection`, on a thread of its own, until stopped. listening() is false when the
// address and port cannot be bound; nothing is accepted then.
class AcceptingListener {
 public:
  AcceptingListener(std::uint32_t address, int port, std::function<void(int)> on_connection) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in bind_to{};
    bind_to.sin_family = AF_INET;
    bind_to.sin_addr.s_addr = htonl(address);
    bind_to.sin_port = htons(static_cast<std::uint16_t>(port));
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&bind_to), sizeof(bind_to)) != 0 ||
        ::listen(fd_, 64) != 0) {
      ::close(fd_);
      fd_ = -1;
      return;
    }
    socklen_t length = sizeof(bind_to);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&bind_to), &length);
    port_ = ntohs(bind_to.sin_port);
    thread_ = std::thread([this, on_connection = std::move(on_connection)] {
      while (!stop_) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 10) <= 0) continue;
        const int connection = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (connection >= 0) on_connection(connection);
      }
    });
  }
  AcceptingListener(const AcceptingListener&) = delete;
  AcceptingListener& operator=(const AcceptingListener&) = delete;
  ~AcceptingListener() {
    stop();
    if (fd_ >= 0) ::close(fd_);
  }

  // Once this returns, `on_connection` is not called again.
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

  bool listening() const { return fd_ >= 0; }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_ = false;
  std::thread thread_;
};

}  // namespace ibprobe::testing

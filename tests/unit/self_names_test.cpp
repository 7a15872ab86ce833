// Which `instance` labels name this exporter: the names come from stand-in sources, so the
// answers are the same on every machine.
#include "self_names.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

namespace ibprobe::testing {
namespace {

using exporter::parse_instance;
using exporter::SelfNames;

// node-7 in the domain example.net, with an address of each family, listening on :9470.
struct Host {
  std::atomic<int> canonical_asked = 0;
  SelfNames names{SelfNames::Sources{
      [] {
        return std::vector<std::string>{"127.0.0.1", "10.1.2.3", "fd00::7", "fe80::1"};
      },
      [] { return std::string("node-7"); },
      [this](const std::string& host) {
        ++canonical_asked;
        return host == "node-7" ? std::string("node-7.example.net") : std::string();
      }}};
  Host() { names.set_listen("", 9470); }
};

TEST(SelfNames, InstancesAsPrometheusWritesThem) {
  struct Case {
    std::string instance;
    std::optional<std::string> host;  // unset: not an instance at all
    std::optional<std::uint16_t> port;
  };
  for (const auto& c : std::vector<Case>{{"node-7:9470", "node-7", 9470},
                                         {"10.1.2.3:9470", "10.1.2.3", 9470},
                                         {"[fd00::7]:9470", "fd00::7", 9470},
                                         {"node-7", "node-7", std::nullopt},
                                         {"fd00::7", "fd00::7", std::nullopt},
                                         {"node-7:http", std::nullopt, std::nullopt},
                                         {":9470", std::nullopt, std::nullopt},
                                         {"", std::nullopt, std::nullopt}}) {
    SCOPED_TRACE(c.instance);
    const auto parsed = parse_instance(c.instance);
    ASSERT_EQ(parsed.has_value(), c.host.has_value());
    if (!parsed) continue;
    EXPECT_EQ(parsed->host, *c.host);
    EXPECT_EQ(parsed->port, c.port);
  }
}

TEST(SelfNames, EveryNameAndAddressOfThisHostAtItsPort) {
  Host host;
  for (const std::string instance :
       {"node-7:9470", "NODE-7:9470", "node-7.:9470", "node-7.example.net:9470", "10.1.2.3:9470",
        "[fd00::7]:9470", "[fd00:0::7]:9470", "[::ffff:10.1.2.3]:9470", "[fe80::1%eth0]:9470",
        "127.0.0.1:9470", "localhost:9470", "10.1.2.3", "node-7", "fd00::7"}) {
    EXPECT_TRUE(host.names.names_this_exporter(instance, "")) << instance;
  }
}

TEST(SelfNames, AnotherPortOrHostIsAnotherExporter) {
  Host host;
  for (const std::string instance :
       {"node-7:9471", "10.1.2.3:19477", "node-8:9470", "10.1.2.4:9470", "node-7.other.net:9470",
        "node-70:9470", "[fd00::8]:9470", "node-7:http"}) {
    EXPECT_FALSE(host.names.names_this_exporter(instance, "")) << instance;
  }
}

TEST(SelfNames, TheResolverIsAskedOnceAndOnlyForADomainTheHostNameLacks) {
  Host host;
  EXPECT_TRUE(host.names.names_this_exporter("10.1.2.3:9470", ""));
  EXPECT_TRUE(host.names.names_this_exporter("node-7:9470", ""));
  EXPECT_FALSE(host.names.names_this_exporter("node-8.example.net:9470", ""));
  EXPECT_EQ(host.canonical_asked, 0);
  EXPECT_TRUE(host.names.names_this_exporter("node-7.example.net:9470", ""));
  EXPECT_FALSE(host.names.names_this_exporter("node-7.other.net:9470", ""));
  EXPECT_EQ(host.canonical_asked, 1);
}

TEST(SelfNames, AlertsInstanceAddsAName) {
  Host host;
  // HOST: every port of that name; HOST:PORT: that one.
  EXPECT_TRUE(host.names.names_this_exporter("ib-node-7:12345", "ib-node-7"));
  EXPECT_TRUE(host.names.names_this_exporter("ib-node-7", "ib-node-7"));
  EXPECT_TRUE(host.names.names_this_exporter("ib-node-7:19477", "ib-node-7:19477"));
  EXPECT_FALSE(host.names.names_this_exporter("ib-node-7:9470", "ib-node-7:19477"));
  EXPECT_FALSE(host.names.names_this_exporter("ib-node-8:19477", "ib-node-7:19477"));
  // The names of its own stay.
  EXPECT_TRUE(host.names.names_this_exporter("10.1.2.3:9470", "ib-node-7:19477"));
}

TEST(SelfNames, ListenHostAndPort) {
  SelfNames names{SelfNames::Sources{[] { return std::vector<std::string>{}; },
                                     [] { return std::string("h"); },
                                     [](const std::string&) { return std::string(); }}};
  // Before the server listens no port is this exporter's.
  EXPECT_FALSE(names.names_this_exporter("192.0.2.1:9470", ""));
  names.set_listen("192.0.2.1", 9470);
  EXPECT_TRUE(names.names_this_exporter("192.0.2.1:9470", ""));
  EXPECT_FALSE(names.names_this_exporter("192.0.2.2:9470", ""));
}

TEST(SelfNames, FindInAPeerList) {
  Host host;
  EXPECT_EQ(host.names.find_in({"node-1:9470", "10.1.2.3:9470", "node-7:9470"}, ""),
            "10.1.2.3:9470");
  EXPECT_EQ(host.names.find_in({"node-1:9470", "node-2:9470"}, ""), "");
}

}  // namespace
}  // namespace ibprobe::testing

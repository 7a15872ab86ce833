// HOST:PORT as operators write it, under the rules of a listen address and of a peer to dial.
#include "ibprobe/host_port.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ibprobe::probes {
namespace {

struct Good {
  std::string text;
  std::string host;
  std::uint16_t port;
};

void expect_parses(const std::vector<Good>& cases, const HostPortRules& rules) {
  for (const auto& c : cases) {
    const auto parsed = parse_host_port(c.text, rules);
    ASSERT_TRUE(parsed.has_value()) << c.text << ": " << parsed.error();
    EXPECT_EQ(parsed->host, c.host) << c.text;
    EXPECT_EQ(parsed->port, c.port) << c.text;
  }
}

// Each bad text with a word its error must contain.
void expect_refuses(const std::vector<std::pair<std::string, std::string>>& cases,
                    const HostPortRules& rules) {
  for (const auto& [text, why] : cases) {
    const auto parsed = parse_host_port(text, rules);
    ASSERT_FALSE(parsed.has_value())
        << text << " parsed as " << parsed->host << " " << parsed->port;
    EXPECT_NE(parsed.error().find(why), std::string::npos) << text << ": " << parsed.error();
  }
}

TEST(HostPort, APeerNeedsAHostAndAPortFrom1) {
  expect_parses({{"10.0.0.2:9471", "10.0.0.2", 9471},
                 {"node1.ib.example:1", "node1.ib.example", 1},
                 {"[fd00::1]:65535", "fd00::1", 65535}},
                HostPortRules::peer());
  expect_refuses({{"node1", "no port"},
                  {":9471", "no host"},
                  {"[]:9471", "no host"},
                  {"node1:", "1-65535"},
                  {"node1:0", "1-65535"},
                  {"node1:65536", "1-65535"},
                  {"node1:+1", "1-65535"},
                  {"node1:-1", "1-65535"},
                  {"node1:94x", "1-65535"},
                  {"fd00::1:9471", "brackets"},
                  {"[fd00::1:9471", "unterminated"},
                  {"[fd00::1]9471", "after ]"}},
                 HostPortRules::peer());
}

TEST(HostPort, APeerWithADefaultPortMayLeaveItOut) {
  expect_parses({{"node1", "node1", 9471}, {"[fd00::1]", "fd00::1", 9471}, {"node1:7", "node1", 7}},
                HostPortRules::peer(9471));
  expect_refuses({{"node1:", "1-65535"}, {"[fd00::1]:", "1-65535"}}, HostPortRules::peer(9471));
}

TEST(HostPort, AListenAddressMayLeaveOutTheHostAndAskForAnyPort) {
  expect_parses({{":9470", "", 9470},
                 {"0.0.0.0:0", "0.0.0.0", 0},
                 {"[::]:9470", "::", 9470},
                 {"[::1]:0", "::1", 0}},
                HostPortRules::listen());
  expect_refuses({{"9470", "no port"}, {"host:65536", "0-65535"}, {"::1:9470", "brackets"}},
                 HostPortRules::listen());
}

TEST(HostPort, WritesIpv6HostsInBracketsSoTheTextParsesBack) {
  for (const HostPort& address :
       {HostPort{"fd00::1", 9471}, HostPort{"10.0.0.2", 1}, HostPort{"node1", 65535}}) {
    const auto text = to_string(address);
    const auto parsed = parse_host_port(text);
    ASSERT_TRUE(parsed.has_value()) << text;
    EXPECT_EQ(parsed->host, address.host);
    EXPECT_EQ(parsed->port, address.port);
  }
  EXPECT_EQ(to_string(HostPort{"fd00::1", 9471}), "[fd00::1]:9471");
}

}  // namespace
}  // namespace ibprobe::probes

#include "target_allowlist.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>
#include <initializer_list>
#include <map>

namespace ibprobe::exporter {
namespace {

using Address = TargetAllowlist::Address;

Address address(const std::string& text) {
  Address out{};
  in_addr v4{};
  if (::inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    out[10] = out[11] = 0xff;
    std::memcpy(out.data() + 12, &v4, 4);
    return out;
  }
  in6_addr v6{};
  EXPECT_EQ(::inet_pton(AF_INET6, text.c_str(), &v6), 1) << text;
  std::memcpy(out.data(), &v6, 16);
  return out;
}

// Name resolution from a table, so the tests do not depend on this host's DNS.
TargetAllowlist::Resolver table(std::map<std::string, std::vector<std::string>> names) {
  return [names = std::move(names)](
             const std::string& name) -> std::expected<std::vector<Address>, std::string> {
    const auto it = names.find(name);
    if (it == names.end()) return std::unexpected(std::string("Name or service not known"));
    std::vector<Address> out;
    for (const auto& text : it->second) out.push_back(address(text));
    return out;
  };
}

TargetAllowlist parse(const std::vector<std::string>& entries) {
  auto parsed = TargetAllowlist::parse(entries);
  if (!parsed) {
    ADD_FAILURE() << parsed.error();
    return TargetAllowlist::parse({}).value();
  }
  return *std::move(parsed);
}

std::string parse_error(const std::vector<std::string>& entries) {
  auto parsed = TargetAllowlist::parse(entries);
  if (!parsed) return parsed.error();
  return "accepted";
}

const auto kNoNames = table({});

// Checks each target against the list without name resolution: literal addresses and names
// match (or not) by themselves.
void expect_admission(const TargetAllowlist& list, std::initializer_list<const char*> admitted,
                      std::initializer_list<const char*> refused) {
  for (const char* target : admitted) EXPECT_TRUE(list.admit(target, kNoNames)) << target;
  for (const char* target : refused) EXPECT_FALSE(list.admit(target, kNoNames)) << target;
}

TEST(TargetAllowlist, EmptyListAllowsEverything) {
  const auto list = parse({});
  EXPECT_TRUE(list.allows_everything());
  expect_admission(list, {"198.51.100.1", "anything.example"}, {});
}

TEST(TargetAllowlist, Ipv4Cidrs) {
  // ::ffff:10.0.0.1 is 10.0.0.1 written as IPv4-mapped IPv6: the same host.
  expect_admission(parse({"10.0.0.0/8", "192.0.2.7", "172.16.0.0/12"}),
                   {"10.255.1.2", "192.0.2.7", "172.31.255.255", "::ffff:10.0.0.1"},
                   {"172.32.0.0", "192.0.2.8", "11.0.0.1", "::ffff:11.0.0.1"});
}

TEST(TargetAllowlist, Ipv6Cidrs) {
  expect_admission(parse({"fd00:1::/32", "2001:db8::5"}),
                   {"fd00:1:ffff::1", "[fd00:1::9]", "fd00:1::9%eth0", "2001:db8::5"},
                   {"2001:db8::6", "fd00:2::1"});
}

TEST(TargetAllowlist, AllOfIpv6DoesNotAllowIpv4) {
  expect_admission(parse({"::/0"}), {"2001:db8::1"}, {"10.0.0.1"});
}

TEST(TargetAllowlist, OddPrefixLengths) {
  expect_admission(parse({"10.1.2.128/25", "fc00::/7"}), {"10.1.2.255", "fc00::1"},
                   {"10.1.2.127", "fe00::1"});
}

TEST(TargetAllowlist, ExactAndWildcardNames) {
  // Names allow names: an address is not let in because some allowed name might resolve to it.
  expect_admission(
      parse({"node1.example.com", "*.ib.example.com"}),
      {"node1.example.com", "NODE1.Example.COM.", "a.ib.example.com", "a.b.ib.example.com"},
      {"ib.example.com", "evilib.example.com", "node1.example.com.evil.net", "node2.example.com",
       "10.0.0.1"});
}

TEST(TargetAllowlist, NameIsAllowedWhenEveryAddressIsInAnAllowedNetwork) {
  const auto list = parse({"10.0.0.0/8", "fd00::/8"});
  const auto names = table({{"inside", {"10.0.0.1", "fd00::1"}},
                            {"straddles", {"10.0.0.1", "203.0.113.9"}},
                            {"outside", {"203.0.113.9"}},
                            {"nothing", {}}});
  EXPECT_TRUE(list.admit("inside", names));
  const auto straddles = list.admit("straddles", names);
  ASSERT_FALSE(straddles);
  EXPECT_NE(straddles.error().find("203.0.113.9"), std::string::npos) << straddles.error();
  EXPECT_FALSE(list.admit("outside", names));
  EXPECT_FALSE(list.admit("nothing", names));
  const auto unknown = list.admit("unknown", names);
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().find("does not resolve"), std::string::npos) << unknown.error();
}

TEST(TargetAllowlist, NameMatchNeedsNoResolution) {
  const auto list = parse({"10.0.0.0/8", "*.lab"});
  int lookups = 0;
  const TargetAllowlist::Resolver counting = [&](const std::string&) {
    ++lookups;
    return std::expected<std::vector<Address>, std::string>(
        std::unexpected(std::string("no DNS here")));
  };
  EXPECT_TRUE(list.admit("host.lab", counting));
  EXPECT_EQ(lookups, 0);
}

TEST(TargetAllowlist, MalformedTargetsAreRefused) {
  expect_admission(parse({"10.0.0.0/8", "*.lab"}), {}, {"", "host name.lab", "-x.lab"});
}

TEST(TargetAllowlist, RealResolverForLocalhost) {
  // localhost resolves to loopback addresses only (RFC 6761), whatever else the host has.
  EXPECT_TRUE(parse({"127.0.0.0/8", "::1/128"}).admit("localhost"));
  EXPECT_FALSE(parse({"10.0.0.0/8"}).admit("localhost"));
}

TEST(TargetAllowlist, BadEntriesSayWhich) {
  EXPECT_NE(parse_error({"10.0.0.0/8", "10.0.0.0/33"}).find("10.0.0.0/33"), std::string::npos);
  EXPECT_NE(parse_error({"fd00::/129"}).find("0 to 128"), std::string::npos);
  EXPECT_NE(parse_error({"10.0.0.0/"}), "accepted");
  EXPECT_NE(parse_error({"10.0.0.0/8x"}), "accepted");
  EXPECT_NE(parse_error({"10.0.0.300/8"}), "accepted");
  EXPECT_NE(parse_error({"bad name!"}), "accepted");
  EXPECT_NE(parse_error({"*"}), "accepted");
  EXPECT_NE(parse_error({""}), "accepted");
  EXPECT_NE(parse_error({"a..b"}), "accepted");
  const auto host_bits = parse_error({"10.1.2.3/8"});
  EXPECT_NE(host_bits.find("10.0.0.0/8"), std::string::npos) << host_bits;
  EXPECT_EQ(parse_error({"0.0.0.0/0", "::/0", "a-b.c_d.example", "*.x"}), "accepted");
}

}  // namespace
}  // namespace ibprobe::exporter

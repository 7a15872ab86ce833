// The targets a probe may be sent to: CIDRs (IPv4, IPv6) and host names, exact or "*.suffix".
// A probe makes both hosts allocate memory and move traffic, so an exporter reachable by many
// should only aim at the hosts it is meant to.
#pragma once

#include <array>
#include <cstdint>
#include <expected>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ibprobe::exporter {

class TargetAllowlist {
 public:
  // An IPv4 address is kept IPv4-mapped (::ffff:a.b.c.d), so one comparison serves both families.
  using Address = std::array<std::uint8_t, 16>;
  // The addresses a name resolves to, or why it does not resolve.
  using Resolver =
      std::function<std::expected<std::vector<Address>, std::string>(const std::string&)>;

  // Each entry: "10.0.0.0/8", "fd00::/8", "192.0.2.7" (one address), "node1.example.com", or
  // "*.ib.example.com" (any name under that domain). An empty list allows every target. Returns
  // the reason for the first entry that is none of these.
  static std::expected<TargetAllowlist, std::string> parse(const std::vector<std::string>& entries);

  // Nothing when `host` (a name, an IPv4 address, or an IPv6 address with or without brackets)
  // may be probed, else why it may not. A name is allowed when it matches a name entry, or when
  // every address it resolves to lies in an allowed CIDR (so a name cannot smuggle in one address
  // that is not); it is resolved with getaddrinfo.
  std::expected<void, std::string> admit(const std::string& host) const;
  // The same with the name resolution supplied.
  std::expected<void, std::string> admit(const std::string& host, const Resolver& resolve) const;

  bool allows_everything() const { return networks_.empty() && names_.empty(); }

 private:
  struct Network {
    Address address{};
    int prefix = 0;  // over the 128-bit (mapped) form
    bool v4 = false;
  };
  struct Name {
    std::string name;  // lower case, no trailing dot; for a wildcard, the suffix with its dot
    bool wildcard = false;
  };

  bool in_networks(const Address& address) const;
  bool matches_name(const std::string& name) const;

  std::vector<Network> networks_;
  std::vector<Name> names_;
};

// getaddrinfo's answer for `name`, as the allowlist compares addresses.
std::expected<std::vector<TargetAllowlist::Address>, std::string> resolve_host(
    const std::string& name);

}  // namespace ibprobe::exporter

// The targets a probe may be sent to: CIDRs (IPv4, IPv6) and host names, exact or "*.suffix".
// A probe makes both hosts allocate memory and move traffic, so an exporter reachable by many
// should only aim at the hosts it is meant to.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace ibprobe::exporter {

class TargetAllowlist {
 public:
  // An IPv4 address is kept IPv4-mapped (::ffff:a.b.c.d), so one comparison serves both families.
  using Address = std::array<std::uint8_t, 16>;
  // The addresses a name resolves to, or why it does not resolve.
  using Resolver =
      std::function<std::variant<std::vector<Address>, std::string>(const std::string&)>;

  // Each entry: "10.0.0.0/8", "fd00::/8", "192.0.2.7" (one address), "node1.example.com", or
  // "*.ib.example.com" (any name under that domain). An empty list allows every target. Returns
  // the reason for the first entry that is none of these.
  static std::variant<TargetAllowlist, std::string> parse(const std::vector<std::string>& entries);

  // Why `host` (a name, an IPv4 address, or an IPv6 address with or without brackets) may not be
  // probed; nothing when it may. A name is allowed when it matches a name entry, or when every
  // address it resolves to lies in an allowed CIDR (so a name cannot smuggle in one address that
  // is not); it is resolved with getaddrinfo.
  std::optional<std::string> refuse(const std::string& host) const;
  // The same with the name resolution supplied.
  std::optional<std::string> refuse(const std::string& host, const Resolver& resolve) const;

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
std::variant<std::vector<TargetAllowlist::Address>, std::string> resolve_host(
    const std::string& name);

}  // namespace ibprobe::exporter

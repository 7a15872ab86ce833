// HOST:PORT as an operator writes it: a name, an IPv4 address, or an IPv6 address in brackets
// ([fd00::1]:9471). One parser for every address ibprobe reads: listen addresses, probe targets,
// mesh peers, the responder's address.
#pragma once

#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <string_view>

namespace ibprobe::probes {

struct HostPort {
  std::string host;  // without the brackets; empty for ":PORT" (every address)
  std::uint16_t port = 0;
};

struct HostPortRules {
  bool host_required = true;
  bool port_zero_allowed = false;
  std::optional<std::uint16_t> default_port;  // when the text names no port

  // Where to listen: no host is every address, port 0 any free port.
  static HostPortRules listen() { return {false, true, std::nullopt}; }
  // A peer to dial, at `default_port` when the text names none.
  static HostPortRules peer(std::optional<std::uint16_t> default_port = std::nullopt) {
    return {true, false, default_port};
  }
};

// The address, or what is wrong with it (the caller names the text it came from).
std::expected<HostPort, std::string> parse_host_port(
    std::string_view text, const HostPortRules& rules = HostPortRules::peer());

// The text form: an IPv6 host in brackets, so that the result parses back.
std::string to_string(const HostPort& address);

}  // namespace ibprobe::probes

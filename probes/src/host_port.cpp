#include "ibprobe/host_port.h"

#include <charconv>
#include <utility>

namespace ibprobe::probes {
namespace {

std::optional<std::uint16_t> parse_port(std::string_view text) {
  std::uint16_t port = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return port;
}

}  // namespace

std::expected<HostPort, std::string> parse_host_port(std::string_view text,
                                                     const HostPortRules& rules) {
  const auto failure = [](std::string why) { return std::unexpected(std::move(why)); };
  std::string_view host = text;
  std::optional<std::string_view> port_text;
  if (text.starts_with('[')) {
    const auto close = text.find(']');
    if (close == std::string_view::npos) return failure("unterminated IPv6 bracket");
    host = text.substr(1, close - 1);
    const auto rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return failure("expected :PORT after ]");
      port_text = rest.substr(1);
    }
  } else if (const auto colon = text.rfind(':'); colon != std::string_view::npos) {
    if (text.find(':') != colon) {
      return failure("write IPv6 addresses in brackets, e.g. [fd00::1]:9471");
    }
    host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
  }
  if (host.empty() && rules.host_required) return failure("no host: use HOST:PORT");
  HostPort address{std::string(host), 0};
  if (!port_text) {
    if (!rules.default_port) return failure("no port: use HOST:PORT");
    address.port = *rules.default_port;
    return address;
  }
  const auto port = parse_port(*port_text);
  if (rules.port_zero_allowed) {
    if (!port) return failure("port must be 0-65535 (0: any free port)");
  } else if (!port || *port == 0) {
    return failure("port must be 1-65535");
  }
  address.port = *port;
  return address;
}

std::string to_string(const HostPort& address) {
  const bool ipv6 = address.host.find(':') != std::string::npos;
  return (ipv6 ? "[" + address.host + "]" : address.host) + ":" + std::to_string(address.port);
}

}  // namespace ibprobe::probes

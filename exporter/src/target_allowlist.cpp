#include "target_allowlist.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <memory>

namespace ibprobe::exporter {
namespace {

using Address = TargetAllowlist::Address;

Address mapped(const in_addr& v4) {
  Address out{};
  out[10] = 0xff;
  out[11] = 0xff;
  std::memcpy(out.data() + 12, &v4, 4);
  return out;
}

bool is_mapped_v4(const Address& address) {
  static constexpr std::array<std::uint8_t, 12> kPrefix = {0, 0, 0, 0, 0,    0,
                                                           0, 0, 0, 0, 0xff, 0xff};
  return std::equal(kPrefix.begin(), kPrefix.end(), address.begin());
}

std::string lower(std::string text) {
  for (auto& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// An address literal: IPv4 dotted quad, or IPv6 (brackets and a %zone allowed). The second member
// says whether it was IPv4.
std::optional<std::pair<Address, bool>> parse_address(std::string text) {
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
    text = text.substr(1, text.size() - 2);
  }
  in_addr v4{};
  if (::inet_pton(AF_INET, text.c_str(), &v4) == 1) return std::pair(mapped(v4), true);
  if (const auto zone = text.find('%'); zone != std::string::npos) text.resize(zone);
  in6_addr v6{};
  if (::inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    Address out{};
    std::memcpy(out.data(), &v6, 16);
    return std::pair(out, false);
  }
  return std::nullopt;
}

bool valid_hostname(const std::string& name) {
  if (name.empty() || name.size() > 253) return false;
  std::size_t label = 0;
  for (std::size_t i = 0; i <= name.size(); ++i) {
    if (i == name.size() || name[i] == '.') {
      if (label == 0 || label > 63 || name[i - 1] == '-' || name[i - label] == '-') return false;
      label = 0;
      continue;
    }
    const auto c = static_cast<unsigned char>(name[i]);
    if (!std::isalnum(c) && c != '-' && c != '_') return false;
    ++label;
  }
  return true;
}

bool in_network(const Address& address, const Address& network, int prefix) {
  const int whole = prefix / 8, bits = prefix % 8;
  if (!std::equal(network.begin(), network.begin() + whole, address.begin())) return false;
  if (bits == 0) return true;
  const auto mask = static_cast<std::uint8_t>(0xff << (8 - bits));
  return (address[whole] & mask) == (network[whole] & mask);
}

std::string to_text(const Address& address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (is_mapped_v4(address)) {
    ::inet_ntop(AF_INET, address.data() + 12, text, sizeof(text));
  } else {
    ::inet_ntop(AF_INET6, address.data(), text, sizeof(text));
  }
  return text;
}

}  // namespace

std::expected<TargetAllowlist, std::string> TargetAllowlist::parse(
    const std::vector<std::string>& entries) {
  TargetAllowlist list;
  for (const auto& entry : entries) {
    const auto slash = entry.find('/');
    const auto address = parse_address(entry.substr(0, slash));
    if (address) {
      const int width = address->second ? 32 : 128;
      int prefix = width;
      if (slash != std::string::npos) {
        const auto digits = std::string_view(entry).substr(slash + 1);
        const auto [end, ec] =
            std::from_chars(digits.data(), digits.data() + digits.size(), prefix);
        if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() ||
            prefix < 0 || prefix > width) {
          return std::unexpected("allowed target '" + entry +
                                 "': the prefix length must be a number from 0 to " +
                                 std::to_string(width));
        }
      }
      const int mapped_prefix = address->second ? prefix + 96 : prefix;
      Address network{};
      const int whole = mapped_prefix / 8, bits = mapped_prefix % 8;
      std::copy(address->first.begin(), address->first.begin() + whole, network.begin());
      if (bits)
        network[whole] = static_cast<std::uint8_t>(address->first[whole] & (0xff << (8 - bits)));
      // A set host bit is most likely a typo for a narrower network; refusing it is safer than
      // silently widening what may be probed.
      if (network != address->first) {
        return std::unexpected("allowed target '" + entry + "' has bits set past its /" +
                               std::to_string(prefix) + " prefix; the network is " +
                               to_text(network) + "/" + std::to_string(prefix));
      }
      list.networks_.push_back(
          {network, mapped_prefix, is_mapped_v4(network) && mapped_prefix >= 96});
      continue;
    }
    if (slash != std::string::npos) {
      return std::unexpected("allowed target '" + entry + "' is not a CIDR: '" +
                             entry.substr(0, slash) + "' is not an IPv4 or IPv6 address");
    }
    std::string name = lower(entry);
    if (name.ends_with('.')) name.pop_back();
    const bool wildcard = name.starts_with("*.");
    if (!valid_hostname(wildcard ? name.substr(2) : name)) {
      return std::unexpected(
          "allowed target '" + entry +
          "' is neither a CIDR, an address, a host name nor a *.domain wildcard");
    }
    list.names_.push_back({wildcard ? name.substr(1) : name, wildcard});
  }
  return list;
}

bool TargetAllowlist::in_networks(const Address& address) const {
  // IPv4 addresses are stored mapped into IPv6; without the family check ::/0 would allow them.
  const bool v4 = is_mapped_v4(address);
  return std::any_of(networks_.begin(), networks_.end(), [&](const Network& network) {
    return network.v4 == v4 && in_network(address, network.address, network.prefix);
  });
}

bool TargetAllowlist::matches_name(const std::string& name) const {
  return std::any_of(names_.begin(), names_.end(), [&](const Name& entry) {
    return entry.wildcard ? name.size() > entry.name.size() && name.ends_with(entry.name)
                          : name == entry.name;
  });
}

std::expected<void, std::string> TargetAllowlist::admit(const std::string& host) const {
  return admit(host, resolve_host);
}

std::expected<void, std::string> TargetAllowlist::admit(const std::string& host,
                                                        const Resolver& resolve) const {
  if (allows_everything()) return {};
  if (const auto address = parse_address(host)) {
    if (in_networks(address->first)) return {};
    return std::unexpected("target " + host + " is not in an allowed network");
  }
  std::string name = lower(host);
  if (name.ends_with('.')) name.pop_back();
  if (!valid_hostname(name)) {
    return std::unexpected("target '" + host + "' is not a valid host name or address");
  }
  if (matches_name(name)) return {};
  if (networks_.empty()) return std::unexpected("target " + host + " is not an allowed host name");
  const auto addresses = resolve(name);
  if (!addresses) {
    return std::unexpected(
        "target " + host +
        " is not an allowed host name and does not resolve: " + addresses.error());
  }
  if (addresses->empty()) return std::unexpected("target " + host + " resolves to no address");
  for (const auto& address : *addresses) {
    if (!in_networks(address)) {
      return std::unexpected("target " + host + " resolves to " + to_text(address) +
                             ", which is not in an allowed network");
    }
  }
  return {};
}

std::expected<std::vector<Address>, std::string> resolve_host(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(name.c_str(), nullptr, &hints, &found); rc != 0) {
    return std::unexpected(std::string(gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owner(found, ::freeaddrinfo);
  std::vector<Address> out;
  for (const auto* a = found; a; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      out.push_back(mapped(reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr));
    } else if (a->ai_family == AF_INET6) {
      Address address{};
      std::memcpy(address.data(), &reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr,
                  16);
      out.push_back(address);
    }
  }
  return out;
}

}  // namespace ibprobe::exporter

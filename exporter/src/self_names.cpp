#include "self_names.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <climits>
#include <cstring>
#include <memory>
#include <utility>

#include "ibprobe/host_port.h"

namespace ibprobe::exporter {
namespace {

// An address in one text form, so that 10.0.0.1, ::ffff:10.0.0.1 and fd00:0::1 / fd00::1 compare
// equal; a name lower case and without its root dot.
std::string canonical_host(std::string_view host) {
  std::string text(host);
  if (const auto zone = text.find('%'); zone != std::string::npos) text.resize(zone);
  in6_addr v6{};
  in_addr v4{};
  std::array<char, INET6_ADDRSTRLEN> out{};
  if (::inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    return ::inet_ntop(AF_INET, &v4, out.data(), out.size());
  }
  if (::inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_V4MAPPED(&v6)) {
      std::memcpy(&v4, &v6.s6_addr[12], sizeof(v4));
      return ::inet_ntop(AF_INET, &v4, out.data(), out.size());
    }
    return ::inet_ntop(AF_INET6, &v6, out.data(), out.size());
  }
  std::string name(host);
  if (name.ends_with('.')) name.pop_back();
  std::ranges::transform(name, name.begin(), [](unsigned char c) { return std::tolower(c); });
  return name;
}

std::vector<std::string> system_interface_addresses() {
  std::vector<std::string> addresses;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return addresses;
  const std::unique_ptr<ifaddrs, decltype(&::freeifaddrs)> owned(list, &::freeifaddrs);
  for (const ifaddrs* entry = list; entry; entry = entry->ifa_next) {
    if (!entry->ifa_addr) continue;
    std::array<char, INET6_ADDRSTRLEN> text{};
    const void* address = nullptr;
    if (entry->ifa_addr->sa_family == AF_INET) {
      address = &reinterpret_cast<const sockaddr_in*>(entry->ifa_addr)->sin_addr;
    } else if (entry->ifa_addr->sa_family == AF_INET6) {
      address = &reinterpret_cast<const sockaddr_in6*>(entry->ifa_addr)->sin6_addr;
    } else {
      continue;
    }
    if (::inet_ntop(entry->ifa_addr->sa_family, address, text.data(), text.size())) {
      addresses.emplace_back(text.data());
    }
  }
  return addresses;
}

std::string system_host_name() {
  std::array<char, HOST_NAME_MAX + 1> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0) return {};
  return name.data();
}

// The resolver's canonical name of this host (its FQDN where /etc/hosts or DNS gives one).
std::string system_canonical_name(const std::string& host_name) {
  if (host_name.empty()) return {};
  addrinfo hints{};
  hints.ai_flags = AI_CANONNAME;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host_name.c_str(), nullptr, &hints, &found) != 0) return {};
  const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owned(found, &::freeaddrinfo);
  return found && found->ai_canonname ? found->ai_canonname : std::string();
}

}  // namespace

std::optional<InstanceAddress> parse_instance(std::string_view instance) {
  // Port 0 stands for "no port written": Prometheus never scrapes port 0.
  const auto parsed = probes::parse_host_port(instance, {true, true, std::uint16_t{0}});
  if (parsed) {
    InstanceAddress address{parsed->host, std::nullopt};
    if (parsed->port != 0) address.port = parsed->port;
    return address;
  }
  // A relabelled instance may be a bare IPv6 address, which HOST:PORT wants in brackets.
  in6_addr v6{};
  if (::inet_pton(AF_INET6, std::string(instance).c_str(), &v6) == 1) {
    return InstanceAddress{std::string(instance), std::nullopt};
  }
  return std::nullopt;
}

SelfNames::Sources SelfNames::system() {
  return {system_interface_addresses, system_host_name, system_canonical_name};
}

SelfNames::SelfNames(Sources sources) : sources_(std::move(sources)) {}

void SelfNames::set_listen(std::string host, std::uint16_t port) {
  std::lock_guard lock(mutex_);
  listen_host_ = std::move(host);
  listen_port_ = port;
}

bool SelfNames::names_this_host(const std::string& host) const {
  const auto wanted = canonical_host(host);
  if (wanted.empty()) return false;
  {
    std::lock_guard lock(mutex_);
    if (!listen_host_.empty() && canonical_host(listen_host_) == wanted) return true;
  }
  if (wanted == "localhost") return true;
  const auto addresses = sources_.interface_addresses();
  if (std::ranges::any_of(addresses,
                          [&](const std::string& a) { return canonical_host(a) == wanted; })) {
    return true;
  }
  const auto name = canonical_host(sources_.host_name());
  if (name.empty()) return false;
  if (name == wanted) return true;
  // The short name of a host whose name carries its domain, and the other way round.
  const auto short_name = [](const std::string& n) { return n.substr(0, n.find('.')); };
  if (wanted.find('.') == std::string::npos && short_name(name) == wanted) return true;
  if (wanted.find('.') != std::string::npos && short_name(wanted) == short_name(name)) {
    // A domain the host name does not carry: only the resolver can say it is this host's.
    std::lock_guard lock(canonical_mutex_);
    if (!canonical_) canonical_ = canonical_host(sources_.canonical_name(sources_.host_name()));
    return *canonical_ == wanted;
  }
  return false;
}

bool SelfNames::names_this_exporter(std::string_view instance, std::string_view configured) const {
  const auto address = parse_instance(instance);
  if (!address) return false;
  if (!configured.empty()) {
    if (const auto own = parse_instance(configured);
        own && canonical_host(own->host) == canonical_host(address->host) &&
        (!own->port || own->port == address->port)) {
      return true;
    }
  }
  if (address->port) {
    std::lock_guard lock(mutex_);
    if (listen_port_ != address->port) return false;
  }
  return names_this_host(address->host);
}

std::string SelfNames::find_in(const std::vector<std::string>& targets,
                               std::string_view configured) const {
  const auto found = std::ranges::find_if(
      targets, [&](const std::string& target) { return names_this_exporter(target, configured); });
  return found == targets.end() ? std::string() : *found;
}

}  // namespace ibprobe::exporter

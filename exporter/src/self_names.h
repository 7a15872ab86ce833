// Whether an alert's `instance` label names this exporter. Prometheus names a target as the site
// listed it: by IP (file_sd lists of addresses, Kubernetes pod targets), by host name or FQDN,
// by a name relabelled into `instance`, with the exporter's port or without. So the exporter
// knows itself by every one of them: the host of its listen address, every address of its
// interfaces (read at each question: a pod or a DHCP lease may change them), its host name,
// short and with the domain its resolver gives, and `alerts.instance` from the configuration.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ibprobe::exporter {

// An `instance` label split as Prometheus writes it: "host:port", "[v6]:port", or a bare host
// (a relabelled instance often has no port). Names are compared without case and without a
// trailing dot, addresses as addresses (::ffff:10.0.0.1 is 10.0.0.1).
struct InstanceAddress {
  std::string host;
  std::optional<std::uint16_t> port;
};
std::optional<InstanceAddress> parse_instance(std::string_view instance);

class SelfNames {
 public:
  // Where the names come from.
  struct Sources {
    std::function<std::vector<std::string>()> interface_addresses;
    std::function<std::string()> host_name;
    std::function<std::string(const std::string& host_name)> canonical_name;
  };
  // The system's: getifaddrs, gethostname, and the resolver's canonical name (asked once, and
  // only for an instance whose domain the host name does not carry).
  static Sources system();
  explicit SelfNames(Sources sources = system());

  // The HTTP server's address, once it listens: its host (empty: every address) and the port it
  // bound. Until then no port is known to be this exporter's.
  void set_listen(std::string host, std::uint16_t port);

  // `instance` names this exporter. `configured`: alerts.instance, "host" (any port of that
  // host) or "host:port" (that one exporter); empty: none. An instance with a port is this
  // exporter only at the port it listens on: several exporters may share one host.
  bool names_this_exporter(std::string_view instance, std::string_view configured) const;

  // The first of a peer list's targets that names this exporter (as names_this_exporter), or
  // empty.
  std::string find_in(const std::vector<std::string>& targets, std::string_view configured) const;

 private:
  bool names_this_host(const std::string& host) const;

  Sources sources_;
  mutable std::mutex mutex_;
  std::string listen_host_;
  std::optional<std::uint16_t> listen_port_;
  // Its own lock: the resolver may take seconds, and the listen address is asked meanwhile.
  mutable std::mutex canonical_mutex_;
  mutable std::optional<std::string> canonical_;
};

}  // namespace ibprobe::exporter

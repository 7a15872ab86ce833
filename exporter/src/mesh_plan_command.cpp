#include "mesh_plan_command.h"

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <variant>

#include "ibprobe/mesh_peers.h"
#include "probe_config.h"

namespace ibprobe::exporter {
namespace {

using mesh::MeshConfig;
using mesh::MeshFabric;
using mesh::MeshPolicy;

void print_plan(const MeshFabric& fabric, std::size_t self,
                std::chrono::system_clock::time_point at, const MeshPolicy& policy, bool with_self,
                std::ostream& out) {
  for (const auto& ping : plan_mesh(fabric, self, at, policy)) {
    nlohmann::ordered_json line;
    if (with_self) line["self"] = fabric.peers()[self].target;
    line["peer"] = fabric.peers()[ping.peer].target;
    line["peer_tor"] = fabric.peers()[ping.peer].tor;
    line["reason"] = to_string(ping.reason);
    line["rate"] = ping.rate_hz;
    out << line.dump() << '\n';
  }
}

}  // namespace

int run_mesh_plan(const Config& config, std::ostream& out, std::ostream& err) {
  MeshConfig mesh_config;
  if (!config.config_file.empty()) {
    auto loaded = load_probe_config(config.config_file);
    if (!loaded) {
      err << "ibprobe_exporter: --config.file: " << loaded.error() << "\n";
      return 2;
    }
    mesh_config = loaded.value().mesh;
  }
  if (!config.mesh_peers_file.empty() || !config.mesh_peers_dns.empty()) {
    mesh_config.peers_file = config.mesh_peers_file;
    mesh_config.peers_dns = config.mesh_peers_dns;
    mesh_config.peers_fabric.reset();
  }
  if (!config.mesh_self.empty()) mesh_config.self = config.mesh_self;
  if (!mesh_config.peers_file.empty() && !mesh_config.peers_dns.empty()) {
    err << "ibprobe_exporter: --mesh.plan: give either --mesh.peers-file or --mesh.peers-dns\n";
    return 2;
  }
  if (mesh_config.peers_file.empty() && mesh_config.peers_dns.empty() &&
      !mesh_config.peers_fabric) {
    err << "ibprobe_exporter: --mesh.plan needs --mesh.peers-file=FILE, "
           "--mesh.peers-dns=NAME:PORT or peers_fabric in --config.file\n";
    return 2;
  }
  if (mesh_config.self.empty()) {
    err << "ibprobe_exporter: --mesh.plan needs --mesh.self=TARGET (or '*' for every host)\n";
    return 2;
  }
  try {
    auto peers = mesh::read_mesh_peers(mesh_config);
    if (!peers) {
      err << "ibprobe_exporter: --mesh.plan: " << peers.error().message << "\n";
      return 2;
    }
    const MeshFabric fabric(*std::move(peers));
    const auto at =
        config.mesh_at
            ? std::chrono::system_clock::time_point(std::chrono::seconds(*config.mesh_at))
            : std::chrono::system_clock::now();
    if (mesh_config.self == "*") {
      for (std::size_t self = 0; self < fabric.peers().size(); ++self) {
        print_plan(fabric, self, at, mesh_config.policy, true, out);
      }
      return 0;
    }
    const auto self = fabric.find(mesh_config.self);
    if (!self) {
      err << "ibprobe_exporter: --mesh.self=" << mesh_config.self << " is not in the peer list\n";
      return 2;
    }
    print_plan(fabric, *self, at, mesh_config.policy, false, out);
    return 0;
  } catch (const std::exception& e) {
    err << "ibprobe_exporter: --mesh.plan: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace ibprobe::exporter

#include "ibprobe/mesh_peers.h"

#include <arpa/inet.h>
#include <netdb.h>

#include <fstream>
#include <memory>
#include <set>
#include <sstream>

#include "ibprobe/host_port.h"
#include "ibprobe/mesh_fabric_peers.h"
#include "ibprobe/yaml_reader.h"

namespace ibprobe::mesh {
namespace {

using yaml::fail;
using yaml::scalar;

// A file_sd target is HOST:PORT, an IPv6 host in brackets; the mesh dials it, so it needs both.
void check_target(const YAML::Node& node, const std::string& target) {
  if (const auto address = probes::parse_host_port(target); !address) {
    fail(node, "target '" + target +
                   "' is not HOST:PORT with a port from 1 to 65535: " + address.error());
  }
}

// Walks the document; a mistake throws yaml::Error, which parse_file_sd returns.
std::vector<MeshPeer> peers_of(std::string_view text) {
  const YAML::Node root = yaml::load(text);
  if (!root.IsSequence()) fail(root, "a file_sd file is a list of target groups");
  std::vector<MeshPeer> peers;
  std::set<std::string, std::less<>> seen;
  for (const auto& group : root) {
    if (!group.IsMap()) fail(group, "a target group must be a mapping with targets and labels");
    yaml::reject_unknown_keys(group, "a target group", {"targets", "labels"});
    const auto targets = group["targets"];
    if (!targets || !targets.IsSequence() || targets.size() == 0) {
      fail(group, "a target group needs a non-empty list of targets");
    }
    MeshPeer labels;
    if (const auto map = group["labels"]) {
      if (!map.IsMap()) fail(map, "labels must be a mapping");
      for (const auto& label : map) {
        const auto name = scalar(label.first, "a label name");
        const auto value = scalar(label.second, "label " + name);
        if (name == kMeshTorLabel) labels.tor = value;
        if (name == kMeshGidFamilyLabel) labels.gid_family = value;
      }
    }
    for (const auto& node : targets) {
      MeshPeer peer = labels;
      peer.target = scalar(node, "a target");
      check_target(node, peer.target);
      if (!seen.insert(peer.target).second)
        fail(node, "target " + peer.target + " is listed twice");
      peers.push_back(std::move(peer));
    }
  }
  return peers;
}

}  // namespace

std::expected<std::vector<MeshPeer>, Error> parse_file_sd(std::string_view text) {
  try {
    return peers_of(text);
  } catch (const yaml::Error& e) {
    return std::unexpected(Error{ErrorKind::kBadPeerList, e.what()});
  }
}

std::expected<std::vector<MeshPeer>, Error> load_file_sd(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::unexpected(Error{ErrorKind::kUnreadable, path + ": cannot be read"});
  std::ostringstream text;
  text << in.rdbuf();
  auto peers = parse_file_sd(text.str());
  if (!peers) peers.error().message = path + ": " + peers.error().message;
  return peers;
}

std::expected<std::vector<MeshPeer>, Error> resolve_dns_peers(const std::string& name_and_port) {
  const auto address = probes::parse_host_port(name_and_port);
  if (!address) {
    return std::unexpected(Error{ErrorKind::kBadPeerList, "'" + name_and_port +
                                                              "' is not NAME:PORT with a port "
                                                              "from 1 to 65535: " +
                                                              address.error()});
  }
  const std::string& name = address->host;
  const std::string port = std::to_string(address->port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(name.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return std::unexpected(
        Error{ErrorKind::kUnresolvable, "cannot resolve " + name + ": " + gai_strerror(rc)});
  }
  const std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owned(found, &freeaddrinfo);
  std::set<std::string> targets;
  for (const addrinfo* info = found; info != nullptr; info = info->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (info->ai_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(info->ai_addr)->sin_addr, text,
                sizeof text);
      targets.insert(std::string(text) + ":" + port);
    } else if (info->ai_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(info->ai_addr)->sin6_addr, text,
                sizeof text);
      // Appended rather than concatenated with operator+: GCC 12 at -O3 reports a false
      // -Wrestrict on "[" + std::string(...).
      std::string target = "[";
      target.append(text).append("]:").append(port);
      targets.insert(std::move(target));
    }
  }
  std::vector<MeshPeer> peers;
  for (const auto& target : targets) peers.push_back(MeshPeer{target, "", ""});
  return peers;
}

std::expected<std::vector<MeshPeer>, Error> read_mesh_peers(const MeshConfig& mesh) {
  if (!mesh.peers_file.empty()) return load_file_sd(mesh.peers_file);
  if (mesh.peers_fabric) return discover_mesh_peers(*mesh.peers_fabric);
  return resolve_dns_peers(mesh.peers_dns);
}

}  // namespace ibprobe::mesh

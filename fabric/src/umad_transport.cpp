// MadTransport over libibumad: one umad port, a PerfMgt agent (QP1) and, where the kernel allows
// it, an SMI agent (QP0) for NodeInfo. The kernel matches responses to sends by transaction ID
// and reports a send that got no answer within its timeout back through the read channel.
#include <infiniband/umad.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "mad_transport.h"
#include "pma_mad.h"

namespace ibprobe::fabric {
namespace {

constexpr int kQp1Qkey = 0x80010000;  // the well-known Q_Key of the GSI (QP1)

std::string port_name(const std::string& ca, int port) {
  return ca + " port " + std::to_string(port);
}

// One port's umad_port_t, released on scope exit.
class UmadPortInfo {
 public:
  UmadPortInfo(const std::string& ca, int port)
      : ok_(umad_get_port(ca.c_str(), port, &info_) == 0) {}
  ~UmadPortInfo() {
    if (ok_) umad_release_port(&info_);
  }
  UmadPortInfo(const UmadPortInfo&) = delete;
  UmadPortInfo& operator=(const UmadPortInfo&) = delete;

  bool ok() const { return ok_; }
  // Kernels write "InfiniBand"; libibumad reports "IB" when sysfs has no link_layer file (old
  // kernels, the ibsim simulator). Only "Ethernet" is RoCE, which has no LID-routed fabric.
  bool infiniband() const { return std::strcmp(info_.link_layer, "Ethernet") != 0; }
  std::string link_layer() const { return info_.link_layer[0] ? info_.link_layer : "unknown"; }

 private:
  umad_port_t info_{};
  bool ok_;
};

// Port numbers of a CA that have a umad device (0 is a switch's management port).
std::vector<int> ports_of(const std::string& ca) {
  umad_ca_t info{};
  if (umad_get_ca(ca.c_str(), &info) < 0) return {};
  std::vector<int> ports;
  for (int p = 0; p < UMAD_CA_MAX_PORTS; ++p) {
    if (info.ports[p]) ports.push_back(info.ports[p]->portnum);
  }
  umad_release_ca(&info);
  return ports;
}

class UmadTransport final : public MadTransport {
 public:
  UmadTransport(int port_id, int perf_agent, int smi_agent)
      : port_id_(port_id), perf_agent_(perf_agent), smi_agent_(smi_agent) {}
  ~UmadTransport() override { umad_close_port(port_id_); }
  UmadTransport(const UmadTransport&) = delete;
  UmadTransport& operator=(const UmadTransport&) = delete;

  bool sends_smps() const override { return smi_agent_ >= 0; }

  int send(std::uint16_t lid, std::span<const std::uint8_t> mad,
           std::chrono::milliseconds timeout) override {
    if (mad.size() != mad::kMadSize) return EINVAL;
    const bool smp = mad[1] == static_cast<std::uint8_t>(mad::MgmtClass::kSubnLidRouted);
    if (smp && smi_agent_ < 0) return EOPNOTSUPP;
    std::vector<std::uint8_t> buffer(umad_size() + mad::kMadSize);
    umad_set_addr(buffer.data(), lid, smp ? 0 : 1, 0, smp ? 0 : kQp1Qkey);
    std::copy(mad.begin(), mad.end(), static_cast<std::uint8_t*>(umad_get_mad(buffer.data())));
    // Retries are the caller's: it spreads them over its own budget.
    const int rc = umad_send(port_id_, smp ? smi_agent_ : perf_agent_, buffer.data(),
                             static_cast<int>(mad::kMadSize), static_cast<int>(timeout.count()), 0);
    if (rc >= 0) return 0;
    return errno != 0 ? errno : -rc;
  }

  std::optional<Received> receive(std::chrono::milliseconds wait) override {
    std::vector<std::uint8_t> buffer(umad_size() + mad::kMadSize);
    int length = static_cast<int>(mad::kMadSize);
    const int rc = umad_recv(port_id_, buffer.data(), &length, static_cast<int>(wait.count()));
    if (rc < 0) return std::nullopt;  // nothing within `wait` (or a read error: same to us)
    const auto* data = static_cast<const std::uint8_t*>(umad_get_mad(buffer.data()));
    const auto size = static_cast<std::size_t>(std::clamp(length, 0, int{mad::kMadSize}));
    return Received{std::vector<std::uint8_t>(data, data + size), umad_status(buffer.data())};
  }

 private:
  int port_id_;
  int perf_agent_;
  int smi_agent_;
};

UmadOpenResult unusable(std::string reason, std::string detail) {
  UmadOpenResult result;
  result.reason = std::move(reason);
  result.detail = std::move(detail);
  return result;
}

}  // namespace

UmadOpenResult open_umad_transport(const std::string& ca, int port) {
  if (umad_init() < 0) {
    return unusable("no_umad", "libibumad cannot be initialised (no ib_umad kernel support)");
  }
  char names[UMAD_MAX_DEVICES][UMAD_CA_NAME_LEN];
  const int count = umad_get_cas_names(names, UMAD_MAX_DEVICES);
  if (count <= 0) {
    return unusable("no_umad", "no RDMA device has a umad interface (/dev/infiniband/umad*)");
  }

  // Pick the port: the requested one, or the first InfiniBand port with a umad device.
  std::string chosen_ca;
  int chosen_port = 0;
  std::vector<std::string> rejected;
  for (int i = 0; i < count && chosen_ca.empty(); ++i) {
    const std::string name = names[i];
    if (!ca.empty() && name != ca) continue;
    for (const int p : ports_of(name)) {
      if (port != 0 && p != port) continue;
      const UmadPortInfo info(name, p);
      if (info.ok() && info.infiniband()) {
        chosen_ca = name;
        chosen_port = p;
        break;
      }
      rejected.push_back(port_name(name, p) + " is " +
                         (info.ok() ? info.link_layer() : "unreadable"));
    }
  }
  if (chosen_ca.empty()) {
    // libibumad names a default "mthca0" when it finds no device at all: it has no ports.
    if (rejected.empty() && ca.empty()) {
      return unusable("no_umad", "no RDMA device has a umad interface (/dev/infiniband/umad*)");
    }
    if (rejected.empty()) {
      return unusable("no_umad", "no umad device for " + ca +
                                     (port != 0 ? " port " + std::to_string(port) : ""));
    }
    std::string detail = "no InfiniBand port to send PerfMgt MADs from (";
    for (std::size_t i = 0; i < rejected.size(); ++i) detail += (i ? ", " : "") + rejected[i];
    return unusable("not_infiniband", detail + "); RoCE has no LID-routed fabric management");
  }

  const int port_id = umad_open_port(chosen_ca.c_str(), chosen_port);
  if (port_id < 0) {
    return unusable("open_failed", "cannot open the umad device of " +
                                       port_name(chosen_ca, chosen_port) + ": " +
                                       std::strerror(-port_id));
  }
  const int perf_agent = umad_register(port_id, static_cast<int>(mad::MgmtClass::kPerfMgt),
                                       mad::kClassVersion, 0, nullptr);
  if (perf_agent < 0) {
    umad_close_port(port_id);
    return unusable("register_failed", "cannot register a PerfMgt agent on " +
                                           port_name(chosen_ca, chosen_port) + ": " +
                                           std::strerror(-perf_agent));
  }
  // Without an SMI agent node GUIDs stay unknown and "all ports" needs AllPortSelect.
  const int smi_agent = umad_register(port_id, static_cast<int>(mad::MgmtClass::kSubnLidRouted),
                                      mad::kClassVersion, 0, nullptr);
  UmadOpenResult result;
  result.transport = std::make_unique<UmadTransport>(port_id, perf_agent, smi_agent);
  result.ca = chosen_ca;
  result.port = chosen_port;
  return result;
}

}  // namespace ibprobe::fabric

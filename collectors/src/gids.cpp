// Populated GID table entries: which index is RoCE v2 / IPv4-mapped on which netdev is what an
// operator needs to pick a GID for perftest or a probe.
#include "collectors_internal.h"
#include "devices.h"
#include "sysfs.h"

namespace ibprobe::collectors {
namespace {

bool is_unset_gid(std::string_view gid) {
  return gid.find_first_not_of("0:") == std::string_view::npos;
}

// Empty table entries read as all zeros on old kernels and fail with EINVAL on new ones.
std::optional<std::string> read_gid_attr(const SysfsDir& dir, const std::string& index,
                                         ErrorSink& errors) {
  auto text = dir.read_text(index);
  if (text) return std::move(*text);
  if (text.error() != ReadError::kInvalid && text.error() != ReadError::kNotFound) {
    errors.record(text.error(), dir.path() / index);
  }
  return std::nullopt;
}

void emit_port(const Device& device, const std::string& port, MetricSet& out, ErrorSink& errors) {
  const SysfsDir port_dir(device.dir, "ports/" + port);
  const SysfsDir gids(port_dir, "gids");
  const SysfsDir types(port_dir, "gid_attrs/types");
  const SysfsDir ndevs(port_dir, "gid_attrs/ndevs");
  for (const auto& index : gids.entries()) {
    const auto gid = read_gid_attr(gids, index, errors);
    if (!gid || is_unset_gid(*gid)) continue;
    const auto type = read_gid_attr(types, index, errors);
    const auto netdev = read_gid_attr(ndevs, index, errors);
    out.add("rdma_port_gid_info",
            "Populated GID table entry; value is always 1. type is the GID type (IB/RoCE v1, "
            "RoCE v2), netdev the interface it belongs to on RoCE.",
            prometheus::MetricType::Gauge,
            {{"device", device.name},
             {"port", port},
             {"index", index},
             {"gid", *gid},
             {"type", type.value_or("")},
             {"netdev", netdev.value_or("")}},
            1);
  }
}

class GidsCollector final : public Collector {
 public:
  std::string_view name() const override { return "gids"; }

  void collect(const Device& device, MetricSet& out, ErrorSink& errors) const override {
    for (const auto& port : list_ports(device)) emit_port(device, port, out, errors);
  }
};

}  // namespace

std::unique_ptr<Collector> make_gids_collector() {
  return std::make_unique<GidsCollector>();
}

}  // namespace ibprobe::collectors

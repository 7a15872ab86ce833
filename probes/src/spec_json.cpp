#include "ibprobe/spec_json.h"

namespace ibprobe::probes {
namespace {

void put_optional(nlohmann::json& out, const char* key, const std::optional<std::uint32_t>& value) {
  if (value) out[key] = *value;
}

}  // namespace

nlohmann::json spec_to_json(const ProbeSpec& spec) {
  using nlohmann::json;
  json out = {
      {"operation", to_string(spec.operation)},
      {"test", to_string(spec.test)},
      {"message_size", spec.message_size},
      {"margin_seconds", spec.margin_seconds},
      {"qps", spec.qps},
      {"tx_depth", spec.tx_depth},
      {"rx_depth", spec.rx_depth},
      {"post_list", spec.post_list},
      {"rc",
       {{"timeout", spec.rc.timeout},
        {"retry_count", spec.rc.retry_cnt},
        {"rnr_retry", spec.rc.rnr_retry},
        {"min_rnr_timer", spec.rc.min_rnr_timer}}},
      {"use_srq", spec.use_srq},
      {"numa", to_string(spec.numa)},
      {"timeout_seconds", spec.timeout_seconds},
  };
  if (spec.iterations) out["iterations"] = *spec.iterations;
  put_optional(out, "duration_seconds", spec.duration_seconds);
  put_optional(out, "mtu", spec.mtu);
  put_optional(out, "cq_moderation", spec.cq_moderation);
  put_optional(out, "inline_size", spec.inline_size);
  put_optional(out, "gid_index", spec.gid_index);
  put_optional(out, "numa_node", spec.numa_node);
  put_optional(out, "peer_gid_index", spec.peer_gid_index);
  if (spec.peer_numa != NumaPolicy::kAuto) out["peer_numa"] = to_string(spec.peer_numa);
  put_optional(out, "peer_numa_node", spec.peer_numa_node);
  // Sent only when set, so a plain probe's request reads the same to a peer that predates them.
  if (spec.validation) out["validation"] = true;
  if (spec.posted_receives != 0) out["posted_receives"] = spec.posted_receives;
  if (spec.receive_sges != 1) out["receive_sges"] = spec.receive_sges;
  if (spec.bidirectional) out["bidirectional"] = true;
  if (spec.cq_events) out["cq_events"] = true;
  if (spec.no_peak) out["no_peak"] = true;
  if (spec.atomic_type != AtomicType::kFetchAndAdd)
    out["atomic_type"] = to_string(spec.atomic_type);
  if (spec.connection != Connection::kRc) out["connection"] = to_string(spec.connection);
  if (spec.sl != 0) out["sl"] = spec.sl;
  if (spec.traffic_class != 0) out["traffic_class"] = spec.traffic_class;
  if (spec.pkey_index != 0) out["pkey_index"] = spec.pkey_index;
  put_optional(out, "dlid", spec.dlid);
  if (spec.rdma_cm) out["rdma_cm"] = true;
  if (const auto& limit = spec.rate_limit) {
    out["rate_limit"] = {{"value", limit->value},
                         {"unit", to_string(limit->unit)},
                         {"limiter", to_string(limit->limiter)}};
  }
  return out;
}

}  // namespace ibprobe::probes

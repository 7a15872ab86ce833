#include "verbs.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <random>
#include <utility>

#include "ibprobe/enum_names.h"

namespace ibprobe::probes::verbs {
namespace {

using DeviceList = std::unique_ptr<ibv_device*, ReleasedBy<ibv_free_device_list>>;

bool is_ipv4_mapped(const ibv_gid& gid) {
  static constexpr std::uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(gid.raw, kPrefix, sizeof(kPrefix)) == 0;
}

}  // namespace

VerbsError::VerbsError(const std::string& what, int err)
    : ProbeFailure(what + ": " + std::strerror(err), FailureKind::kVerbs) {}

std::vector<std::string> device_names() {
  int count = 0;
  DeviceList list(ibv_get_device_list(&count));
  std::vector<std::string> names;
  for (int i = 0; list && i < count; ++i) names.emplace_back(ibv_get_device_name(list.get()[i]));
  return names;
}

Context open_device(const std::string& name) {
  int count = 0;
  DeviceList list(ibv_get_device_list(&count));
  if (!list) throw VerbsError("ibv_get_device_list", errno);
  std::string found;
  for (int i = 0; i < count; ++i) {
    ibv_device* device = list.get()[i];
    if (name == ibv_get_device_name(device)) {
      Context context(ibv_open_device(device));
      if (!context) throw VerbsError("ibv_open_device(" + name + ")", errno);
      return context;
    }
    found += (found.empty() ? "" : ", ") + std::string(ibv_get_device_name(device));
  }
  throw VerbsError("no RDMA device named '" + name +
                   "' (present: " + (found.empty() ? "none" : found) + ")");
}

PortFacts query_port(ibv_context* context, std::uint8_t port, int requested_gid_index) {
  PortFacts facts;
  if (const int rc = ibv_query_port(context, port, &facts.attr); rc != 0) {
    throw VerbsError("ibv_query_port(" + std::to_string(port) + ")", rc);
  }
  facts.is_ethernet = facts.attr.link_layer == IBV_LINK_LAYER_ETHERNET;
  int chosen = requested_gid_index;
  if (chosen < 0 && facts.is_ethernet) {
    std::vector<ibv_gid_entry> entries(static_cast<std::size_t>(facts.attr.gid_tbl_len));
    const ssize_t n = ibv_query_gid_table(context, entries.data(), entries.size(), 0);
    if (n < 0) throw VerbsError("ibv_query_gid_table", static_cast<int>(-n));
    int any_v2 = -1;
    for (ssize_t i = 0; i < n; ++i) {
      const auto& e = entries[static_cast<std::size_t>(i)];
      if (e.port_num != port || e.gid_type != IBV_GID_TYPE_ROCE_V2) continue;
      if (is_ipv4_mapped(e.gid)) {
        chosen = static_cast<int>(e.gid_index);
        break;
      }
      if (any_v2 < 0) any_v2 = static_cast<int>(e.gid_index);
    }
    if (chosen < 0) chosen = any_v2;
  }
  facts.gid_index = chosen < 0 ? 0 : chosen;
  ibv_gid gid{};
  if (const int rc = ibv_query_gid(context, port, facts.gid_index, &gid); rc != 0) {
    throw VerbsError("ibv_query_gid(index " + std::to_string(facts.gid_index) + ")", rc);
  }
  std::memcpy(facts.gid.data(), gid.raw, facts.gid.size());
  // An index the port has no address at reads as zeros, and a QP addressed from it cannot reach
  // its peer: refuse it here, where the index is known, not at the peer's RTR.
  if (facts.is_ethernet &&
      std::all_of(facts.gid.begin(), facts.gid.end(), [](std::uint8_t b) { return b == 0; })) {
    throw VerbsError("GID index " + std::to_string(facts.gid_index) + " of " +
                         ibv_get_device_name(context->device) + " port " + std::to_string(port) +
                         " holds no address",
                     EINVAL);
  }
  return facts;
}

double port_rate_gbps(const ibv_port_attr& attr) {
  // The IB encodings of ibv_port_attr::active_width (lanes) and active_speed (Gbit/s a lane).
  static constexpr std::pair<std::uint8_t, double> kLanes[] = {
      {1, 1}, {2, 4}, {4, 8}, {8, 12}, {16, 2}};
  static constexpr std::pair<std::uint8_t, double> kLaneGbps[] = {
      {1, 2.5},   // SDR
      {2, 5},     // DDR
      {4, 10},    // QDR
      {8, 10},    // FDR10
      {16, 14},   // FDR
      {32, 25},   // EDR
      {64, 50},   // HDR
      {128, 100}  // NDR
  };
  const auto decoded = [](const auto& table, std::uint8_t code) {
    const auto* entry = std::find_if(std::begin(table), std::end(table),
                                     [&](const auto& e) { return e.first == code; });
    return entry == std::end(table) ? 0.0 : entry->second;
  };
  return decoded(kLanes, attr.active_width) * decoded(kLaneGbps, attr.active_speed);
}

ibv_mtu mtu_enum(std::uint32_t bytes) {
  switch (bytes) {
    case 256:
      return IBV_MTU_256;
    case 512:
      return IBV_MTU_512;
    case 1024:
      return IBV_MTU_1024;
    case 2048:
      return IBV_MTU_2048;
    case 4096:
      return IBV_MTU_4096;
  }
  throw std::invalid_argument("mtu " + std::to_string(bytes) + " is not an IB MTU");
}

std::uint32_t mtu_bytes(ibv_mtu mtu) {
  return 128u << static_cast<int>(mtu);
}

RegisteredBuffer register_buffer(ibv_pd* pd, std::size_t size, int extra_access) {
  RegisteredBuffer buffer;
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t rounded = (size + page - 1) / page * page;
  void* memory = nullptr;
  if (const int rc = posix_memalign(&memory, page, rounded); rc != 0) {
    throw VerbsError("posix_memalign(" + std::to_string(rounded) + ")", rc);
  }
  buffer.memory.reset(static_cast<std::uint8_t*>(memory));
  std::memset(memory, 0, rounded);
  buffer.size = rounded;
  const int access =
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | extra_access;
  const int relaxed = access | IBV_ACCESS_RELAXED_ORDERING;
  buffer.mr.reset(ibv_reg_mr(pd, memory, rounded, relaxed));
  buffer.relaxed_ordering = buffer.mr != nullptr;
  if (!buffer.mr && errno == EINVAL) buffer.mr.reset(ibv_reg_mr(pd, memory, rounded, access));
  if (!buffer.mr) throw VerbsError("ibv_reg_mr(" + std::to_string(rounded) + " bytes)", errno);
  return buffer;
}

std::expected<void, std::string> check_atomics(const ibv_device_attr& attr,
                                               const std::string& device) {
  if (attr.atomic_cap != IBV_ATOMIC_NONE) return {};
  return std::unexpected(device + " does not execute atomic operations (atomic_cap NONE)");
}

// Drawn from the system's source for each queue pair: a thread_local std::mt19937 would be 5 KB
// of static TLS that glibc clears in every thread the exporter starts (about 80).
std::uint32_t random_psn() {
  return std::random_device{}() & 0xffffff;
}

constexpr EnumNames<ibv_qp_state, 7> kQpStateNames{{{IBV_QPS_RESET, "RESET"},
                                                    {IBV_QPS_INIT, "INIT"},
                                                    {IBV_QPS_RTR, "RTR"},
                                                    {IBV_QPS_RTS, "RTS"},
                                                    {IBV_QPS_SQD, "SQD"},
                                                    {IBV_QPS_SQE, "SQE"},
                                                    {IBV_QPS_ERR, "ERR"}}};

std::string_view qp_state_name(ibv_qp_state state) {
  return name_of(kQpStateNames, state, "UNKNOWN");
}

void modify_qp(ibv_qp* qp, ibv_qp_attr& attr, int mask, const char* step) {
  if (const int rc = ibv_modify_qp(qp, &attr, mask); rc != 0) {
    throw VerbsError(std::string("ibv_modify_qp to ") + step, rc);
  }
}

namespace {

// INIT's port and P_Key entry, common to every transport.
constexpr int kInitMask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
ibv_qp_attr initialized(std::uint8_t port_number, std::uint16_t pkey_index) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = pkey_index;
  attr.port_num = port_number;
  return attr;
}

}  // namespace

void rc_qp_to_init(ibv_qp* qp, std::uint8_t port_number, unsigned access,
                   std::uint16_t pkey_index) {
  ibv_qp_attr attr = initialized(port_number, pkey_index);
  attr.qp_access_flags = access;
  modify_qp(qp, attr, kInitMask | IBV_QP_ACCESS_FLAGS, "INIT");
}

ibv_ah_attr address_vector(const PortFacts& port, std::uint8_t port_number, const RcPeer& peer,
                           const AddressLane& lane) {
  ibv_ah_attr ah{};
  ah.dlid = lane.dlid.value_or(peer.lid);
  ah.port_num = port_number;
  // rxe ignores the SL (its packets carry no VL, and it maps no priority from it).
  ah.sl = lane.sl;
  // RoCE always routes by GID; InfiniBand needs the GRH only across subnets.
  if (port.is_ethernet) {
    ah.is_global = 1;
    std::memcpy(ah.grh.dgid.raw, peer.gid.data(), peer.gid.size());
    ah.grh.sgid_index = static_cast<std::uint8_t>(port.gid_index);
    ah.grh.hop_limit = 64;
    ah.grh.traffic_class = lane.traffic_class;
  }
  return ah;
}

std::array<std::uint8_t, 16> grh_source_gid(const std::uint8_t* grh) {
  std::array<std::uint8_t, 16> gid{};
  const bool ipv6 = (grh[0] >> 4) == 6;
  if (!ipv6 && (grh[20] >> 4) == 4) {
    gid[10] = 0xff;
    gid[11] = 0xff;
    std::memcpy(gid.data() + 12, grh + 32, 4);
  } else {
    std::memcpy(gid.data(), grh + 8, gid.size());
  }
  return gid;
}

void ud_qp_to_rts(ibv_qp* qp, std::uint8_t port_number, std::uint16_t pkey_index,
                  std::uint32_t qkey, std::uint32_t sq_psn) {
  ibv_qp_attr attr = initialized(port_number, pkey_index);
  attr.qkey = qkey;
  modify_qp(qp, attr, kInitMask | IBV_QP_QKEY, "UD INIT");
  attr = {};
  attr.qp_state = IBV_QPS_RTR;
  modify_qp(qp, attr, IBV_QP_STATE, "UD RTR");
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = sq_psn;
  modify_qp(qp, attr, IBV_QP_STATE | IBV_QP_SQ_PSN, "UD RTS");
}

ibv_qp_attr rtr_attributes(const PortFacts& port, std::uint8_t port_number, const RcPeer& peer,
                           const AddressLane& lane) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = peer.path_mtu;
  attr.dest_qp_num = peer.qpn;
  attr.rq_psn = peer.psn;
  attr.ah_attr = address_vector(port, port_number, peer, lane);
  return attr;
}

namespace {

constexpr int kPathMask =
    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;

}  // namespace

void uc_qp_to_rts(ibv_qp* qp, const PortFacts& port, std::uint8_t port_number, const RcPeer& peer,
                  std::uint32_t sq_psn, const AddressLane& lane) {
  ibv_qp_attr attr = rtr_attributes(port, port_number, peer, lane);
  modify_qp(qp, attr, kPathMask, "RTR");
  attr = {};
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = sq_psn;
  modify_qp(qp, attr, IBV_QP_STATE | IBV_QP_SQ_PSN, "RTS");
}

void rc_qp_to_rts(ibv_qp* qp, const PortFacts& port, std::uint8_t port_number, const RcPeer& peer,
                  std::uint32_t sq_psn, const RcKnobs& rc, std::uint8_t max_dest_rd_atomic,
                  std::uint8_t max_rd_atomic, const AddressLane& lane) {
  ibv_qp_attr attr = rtr_attributes(port, port_number, peer, lane);
  attr.max_dest_rd_atomic = max_dest_rd_atomic;
  attr.min_rnr_timer = static_cast<std::uint8_t>(rc.min_rnr_timer);
  modify_qp(qp, attr, kPathMask | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER, "RTR");
  attr = {};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = static_cast<std::uint8_t>(rc.timeout);
  attr.retry_cnt = static_cast<std::uint8_t>(rc.retry_cnt);
  attr.rnr_retry = static_cast<std::uint8_t>(rc.rnr_retry);
  attr.sq_psn = sq_psn;
  attr.max_rd_atomic = max_rd_atomic;
  modify_qp(qp, attr,
            IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                IBV_QP_MAX_QP_RD_ATOMIC,
            "RTS");
}

}  // namespace ibprobe::probes::verbs

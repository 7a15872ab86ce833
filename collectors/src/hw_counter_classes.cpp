#include "ibprobe/hw_counter_classes.h"

#include <array>
#include <string>

#include "ibprobe/enum_names.h"

namespace ibprobe::collectors {
namespace {

// One hw_counters name as a driver publishes it. The classification is by name: where two of
// these drivers publish the same name (duplicate_request: mlx5, rxe; out_of_buffer: mlx5,
// bnxt_re since its names followed mlx5's) it means the same thing. Names of these drivers not
// listed here (resource counts, traffic, local completion errors, driver command statistics)
// are informative, as is every name of any other driver.
struct Entry {
  std::string_view name;
  HwCounterClass counter_class;
  std::string_view drivers;  // whose kernel source defines it; see kSources
};

// Sources, all in the Linux kernel tree:
//   mlx5    drivers/infiniband/hw/mlx5/counters.c (retrans_q_cnts, out_of_seq_q_cnts,
//           extended_err_cnts, roce_accl_cnts, cong_cnts, basic/rdmarx/rdmatx op counters;
//           each q counter also as vport_<name> in switchdev mode)
//   rxe     drivers/infiniband/sw/rxe/rxe_hw_counters.c (rxe_counter_name)
//   irdma   drivers/infiniband/hw/irdma/verbs.c (irdma_hw_stat_descs)
//   bnxt_re drivers/infiniband/hw/bnxt_re/hw_counters.c (bnxt_re_stat_descs; newer kernels
//           renamed some to the mlx5 names: out_of_buffer, np_cnp_pkts, rp_cnp_handled,
//           np_ecn_marked_roce_packets)
//   efa     drivers/infiniband/hw/efa/efa_verbs.c (EFA_DEFINE_PORT_STATS)
//   hns     drivers/infiniband/hw/hns/hns_roce_main.c (hns_roce_port_stats_descs)
// The enumerators by their short names inside the table only: in a unity batch this file shares
// its namespace with others that name their own classes kInformative.
constexpr auto kTable = [] {
  using enum HwCounterClass;
  return std::array{
      // Retransmission
      Entry{"duplicate_request", kRetransmission, "mlx5 rxe"},
      Entry{"req_transport_retries_exceeded", kRetransmission, "mlx5"},
      Entry{"roce_adp_retrans", kRetransmission, "mlx5"},
      Entry{"completer_retry_err", kRetransmission, "rxe"},
      Entry{"retry_exceeded_err", kRetransmission, "rxe"},
      Entry{"tcpRetransSegs", kRetransmission, "irdma"},
      Entry{"dup_req", kRetransmission, "bnxt_re"},
      Entry{"max_retry_exceeded", kRetransmission, "bnxt_re"},
      Entry{"retrans_pkts", kRetransmission, "efa"},
      Entry{"retrans_bytes", kRetransmission, "efa"},
      // Sequence error
      Entry{"out_of_sequence", kSequenceError, "mlx5"},
      Entry{"packet_seq_err", kSequenceError, "mlx5"},
      Entry{"implied_nak_seq_err", kSequenceError, "mlx5"},
      Entry{"out_of_seq_request", kSequenceError, "rxe"},
      Entry{"rcvd_seq_err", kSequenceError, "rxe"},
      Entry{"seq_err_naks_rcvd", kSequenceError, "bnxt_re"},
      Entry{"oos_drop_count", kSequenceError, "bnxt_re"},
      // ACK timeout
      Entry{"local_ack_timeout_err", kAckTimeout, "mlx5"},
      Entry{"roce_adp_retrans_to", kAckTimeout, "mlx5"},
      Entry{"to_retransmits", kAckTimeout, "bnxt_re"},
      Entry{"retrans_timeout_events", kAckTimeout, "efa"},
      // RNR NAKs (back-pressure: no receive posted)
      Entry{"rcvd_rnr_err", kRnrNak, "rxe"},
      Entry{"send_rnr_err", kRnrNak, "rxe"},
      Entry{"rnr_naks_rcvd", kRnrNak, "bnxt_re"},
      // RNR retry exceeded
      Entry{"rnr_nak_retry_err", kRnrRetryExceeded, "mlx5"},
      Entry{"req_rnr_retries_exceeded", kRnrRetryExceeded, "mlx5"},
      Entry{"retry_rnr_exceeded_err", kRnrRetryExceeded, "rxe"},
      // Remote access and operation errors
      Entry{"req_remote_invalid_request", kRemoteError, "mlx5"},
      Entry{"req_remote_access_errors", kRemoteError, "mlx5"},
      Entry{"resp_remote_access_errors", kRemoteError, "mlx5"},
      Entry{"remote_invalid_req_err", kRemoteError, "bnxt_re"},
      Entry{"remote_access_err", kRemoteError, "bnxt_re"},
      Entry{"remote_op_err", kRemoteError, "bnxt_re"},
      Entry{"res_rx_invalid_rkey", kRemoteError, "bnxt_re"},
      Entry{"res_rx_no_perm", kRemoteError, "bnxt_re"},
      Entry{"res_rx_range_err", kRemoteError, "bnxt_re"},
      Entry{"res_rx_domain_err", kRemoteError, "bnxt_re"},
      Entry{"res_tx_invalid_rkey", kRemoteError, "bnxt_re"},
      Entry{"res_tx_no_perm", kRemoteError, "bnxt_re"},
      Entry{"res_tx_range_err", kRemoteError, "bnxt_re"},
      Entry{"res_tx_domain_err", kRemoteError, "bnxt_re"},
      // Out-of-buffer drops
      Entry{"out_of_buffer", kOutOfBuffer, "mlx5 bnxt_re"},
      Entry{"rx_out_of_buffer", kOutOfBuffer, "bnxt_re"},
      Entry{"rx_drops", kOutOfBuffer, "efa"},
      // Congestion
      Entry{"np_cnp_sent", kCongestion, "mlx5"},
      Entry{"np_ecn_marked_roce_packets", kCongestion, "mlx5 bnxt_re"},
      Entry{"rp_cnp_handled", kCongestion, "mlx5 bnxt_re"},
      Entry{"rp_cnp_ignored", kCongestion, "mlx5"},
      Entry{"cc_rx_ce_pkts", kCongestion, "mlx5"},
      Entry{"cc_rx_cnp_pkts", kCongestion, "mlx5"},
      Entry{"cc_tx_cnp_pkts", kCongestion, "mlx5"},
      Entry{"cnpSent", kCongestion, "irdma"},
      Entry{"cnpHandled", kCongestion, "irdma"},
      Entry{"cnpIgnored", kCongestion, "irdma"},
      Entry{"RxECNMrkd", kCongestion, "irdma"},
      Entry{"tx_cnp_pkts", kCongestion, "bnxt_re"},
      Entry{"rx_cnp_pkts", kCongestion, "bnxt_re"},
      Entry{"rx_ecn_marked_pkts", kCongestion, "bnxt_re"},
      Entry{"np_cnp_pkts", kCongestion, "bnxt_re"},
      Entry{"tx_cnp_pkt", kCongestion, "hns"},
      Entry{"rx_cnp_pkt", kCongestion, "hns"},
  };
}();

constexpr std::string_view kMlx5VportPrefix = "vport_";

const Entry* find(std::string_view name) {
  for (const auto& entry : kTable) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

constexpr EnumNames<HwCounterClass, 9> kHwCounterClassNames{
    {{HwCounterClass::kInformative, "informative"},
     {HwCounterClass::kRetransmission, "retransmission"},
     {HwCounterClass::kSequenceError, "sequence_error"},
     {HwCounterClass::kAckTimeout, "ack_timeout"},
     {HwCounterClass::kRnrNak, "rnr_nak"},
     {HwCounterClass::kRnrRetryExceeded, "rnr_retry_exceeded"},
     {HwCounterClass::kRemoteError, "remote_error"},
     {HwCounterClass::kOutOfBuffer, "out_of_buffer"},
     {HwCounterClass::kCongestion, "congestion"}}};

}  // namespace

std::string_view to_string(HwCounterClass counter_class) {
  return name_of(kHwCounterClassNames, counter_class, "informative");
}

HwCounterClass classify_hw_counter(std::string_view name) {
  if (const Entry* entry = find(name)) return entry->counter_class;
  // mlx5 in switchdev mode publishes each q counter of a representor as vport_<name>.
  if (name.starts_with(kMlx5VportPrefix)) {
    const Entry* entry = find(name.substr(kMlx5VportPrefix.size()));
    if (entry && entry->drivers.find("mlx5") != std::string_view::npos) {
      return entry->counter_class;
    }
  }
  return HwCounterClass::kInformative;
}

}  // namespace ibprobe::collectors

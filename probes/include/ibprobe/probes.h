// Public interface of the probes library: what a verbs probe is asked to do (ProbeSpec), the
// bounds a responder puts on a peer's request, the statistics of a run with perftest's exact
// semantics, and how port-counter deltas seen during a run are read. Hardware-free: nothing here
// touches verbs or sysfs.
#pragma once

#include <array>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ibprobe/counter_sample.h"

namespace ibprobe::probes {

// ---------------------------------------------------------------------------------------------
// Probe specification

// kAtomic: perftest's ib_atomic_bw and ib_atomic_lat, one 8-byte atomic per message.
enum class Operation { kWrite, kRead, kSend, kAtomic };
enum class TestKind { kBandwidth, kLatency };
// The atomic an atomic probe posts (perftest's -A): fetch-and-add of 1, or compare-and-swap.
enum class AtomicType { kFetchAndAdd, kCompareAndSwap };
// The transport of the probe's QPs (perftest's -c): reliable connected; unreliable connected (no
// ACKs, no retransmission: a lost packet loses its message); unreliable datagram (send only,
// one packet per message, addressed through an address handle, received behind a 40-byte GRH;
// perftest's default size is cut to the path MTU, a larger size asked for is refused, as
// perftest does both).
enum class Connection { kRc, kUc, kUd };
enum class NumaPolicy {
  kAuto,  // bind CPU and memory to the HCA's node (device/numa_node)
  kNone,  // leave placement to the scheduler
  kNode,  // bind to ProbeSpec::numa_node
};

std::string_view to_string(Operation operation);
std::string_view to_string(TestKind test);
std::string_view to_string(NumaPolicy policy);
std::string_view to_string(AtomicType type);
std::string_view to_string(Connection connection);
std::optional<Operation> parse_operation(std::string_view text);
// perftest's spellings: FETCH_AND_ADD, CMP_AND_SWAP; RC, UC, UD.
std::optional<AtomicType> parse_atomic_type(std::string_view text);
std::optional<Connection> parse_connection(std::string_view text);
std::optional<TestKind> parse_test_kind(std::string_view text);
std::optional<NumaPolicy> parse_numa_policy(std::string_view text);

// A NUMA choice as the command line and the modules spell it: "auto", "none" or a node number
// (kNode with that node); nothing for any other text.
struct NumaChoice {
  NumaPolicy policy = NumaPolicy::kAuto;
  std::optional<std::uint32_t> node;
};
std::optional<NumaChoice> parse_numa_choice(std::string_view text);

// The lane a side's QPs used: the spec's sl, traffic_class and pkey_index as applied, or with
// rdma_cm the path's the connection manager resolved (its SL, the traffic class it routed by,
// its P_Key entry).
struct Lane {
  std::uint32_t sl = 0;
  std::uint32_t traffic_class = 0;
  std::uint32_t pkey_index = 0;

  bool operator==(const Lane&) const = default;
};

// Reliable Connection QP attributes set on the INIT -> RTR -> RTS path.
struct RcKnobs {
  std::uint32_t timeout = 14;  // local ACK timeout exponent: 4.096 us * 2^timeout (14 ~ 67 ms)
  std::uint32_t retry_cnt = 7;
  std::uint32_t rnr_retry = 7;  // 7 means retry forever on RNR NAK (back-pressure, not an error)
  std::uint32_t min_rnr_timer = 12;

  bool operator==(const RcKnobs&) const = default;
};

// A bandwidth probe's pace cap, perftest's --rate_limit with --rate_units (g, M, p).
enum class RateUnit {
  kGbps,   // decimal gigabits of payload per second
  kMiBps,  // 2^20 bytes of payload per second
  kPps,    // messages per second
};
// Who enforces the cap. Software (perftest's default, SW_RATE_LIMIT): the posting loop waits
// between post lists. Hardware: the QP's rate through ibv_modify_qp_rate_limit, refused when
// the device does not take it. Auto: hardware where the device takes it, software otherwise.
enum class RateLimiter { kSoftware, kHardware, kAuto };
struct RateLimit {
  double value = 0;
  RateUnit unit = RateUnit::kGbps;
  RateLimiter limiter = RateLimiter::kSoftware;

  bool operator==(const RateLimit&) const = default;
};
std::string_view to_string(RateUnit unit);
std::string_view to_string(RateLimiter limiter);
std::optional<RateUnit> parse_rate_unit(std::string_view text);
std::optional<RateLimiter> parse_rate_limiter(std::string_view text);
// The cap in payload bytes per second for messages of `message_size` bytes.
double rate_limit_bytes_per_second(const RateLimit& limit, std::uint64_t message_size);

// Path MTUs InfiniBand defines (RoCE uses the same set): 256, 512, 1024, 2048, 4096 bytes.
bool is_ib_mtu(std::uint32_t bytes);

// Everything both ends of a probe must agree on. The initiator sends it whole to the responder,
// so "the same options on both sides" holds by construction.
struct ProbeSpec {
  Operation operation = Operation::kWrite;
  TestKind test = TestKind::kBandwidth;
  // Atomic probes only.
  AtomicType atomic_type = AtomicType::kFetchAndAdd;
  Connection connection = Connection::kRc;
  std::uint64_t message_size = 65536;
  // Exactly one of iterations and duration_seconds is set.
  std::optional<std::uint64_t> iterations = 5000;
  std::optional<std::uint32_t> duration_seconds;
  // Duration mode only: seconds excluded from the measurement at the start (warm-up) and again
  // at the end (cool-down), as perftest's --margin.
  std::uint32_t margin_seconds = 2;
  std::uint32_t qps = 1;
  std::uint32_t tx_depth = 128;
  std::uint32_t rx_depth = 512;
  // A completion every cq_moderation messages; unset: perftest's rule, effective_cq_moderation().
  std::optional<std::uint32_t> cq_moderation;
  // Work requests chained into one ibv_post_send, as perftest's -l.
  std::uint32_t post_list = 1;
  // Largest message sent inline; unset: perftest's default for each side's own device
  // (perftest_default_inline()).
  std::optional<std::uint32_t> inline_size;
  std::optional<std::uint32_t> mtu;  // bytes; unset: the port's active MTU
  // The initiator's GID index, and the responder's (perftest's -x is per side); unset: prefer a
  // RoCE v2 IPv4-mapped GID.
  std::optional<std::uint32_t> gid_index;
  std::optional<std::uint32_t> peer_gid_index;
  // The lane both sides' QPs send in, as perftest's -S, --tclass and --pkey_index; 0 is
  // perftest's default for each. sl: the address vector's service level (InfiniBand: selects the
  // virtual lane; RoCE drivers map it to a priority or, as rxe, ignore it). traffic_class: the
  // GRH's traffic class, on RoCE v2 the IP TOS byte of every packet (DSCP << 2 | ECN); on
  // InfiniBand only sent with a GRH. pkey_index: the entry of the port's P_Key table the QPs
  // use (checked against each side's own table before anything is allocated).
  std::uint32_t sl = 0;
  std::uint32_t traffic_class = 0;
  std::uint32_t pkey_index = 0;
  // perftest's --dlid: the LID the initiator's QPs send to instead of the one the responder
  // announced (InfiniBand: a LID of the peer's LMC range picks one of the paths the subnet
  // manager routed to it). A unicast LID, 1..0xBFFF; refused on RoCE, which routes by GID and
  // never looks at a LID, and with rdma_cm, whose path record gives the LID.
  std::optional<std::uint32_t> dlid;
  // perftest's -R: the QPs are connected through the RDMA connection manager (librdmacm), as the
  // workloads that connect by IP address are (NVMe-oF, iSER, SMB Direct, MPI over rdma_cm): it
  // resolves the peer's address to a path (ARP and the GID table on RoCE, the SA's path record
  // on InfiniBand) and carries QP numbers and PSNs in its own REQ, REP and RTU. The control
  // channel still carries the spec, the buffers' keys and the results. RC, and UD by a SIDR
  // exchange (no UC, as perftest); the path's SL, P_Key and GID are then the connection
  // manager's, so sl, pkey_index, dlid and the GID indexes are refused with it.
  bool rdma_cm = false;
  RcKnobs rc;
  bool use_srq = false;
  // perftest's -e: each side sleeps on its CQ's completion channel whenever the CQ is empty,
  // instead of polling it; the latencies then include the interrupt and the wake-up.
  bool cq_events = false;
  // Where the initiator binds CPU and buffers, and where the responder does: each host's HCA
  // sits on its own node, so the choice is per side.
  NumaPolicy numa = NumaPolicy::kAuto;
  std::optional<std::uint32_t> numa_node;  // with NumaPolicy::kNode only
  NumaPolicy peer_numa = NumaPolicy::kAuto;
  std::optional<std::uint32_t> peer_numa_node;  // with peer_numa kNode only
  std::uint32_t timeout_seconds = 30;           // whole run, connection to release
  // Correctness probes (write and send bandwidth): every message carries a header and a
  // checksummed pseudo-random payload that the receiving side verifies. Slower than a plain run;
  // its figures are not perftest's. Atomic bandwidth: each compare-and-swap expects the value the
  // QP's earlier atomics to its address left (and swaps in the next), and after the run the
  // initiator reads every target back: each must hold the count of atomics sent to it.
  bool validation = false;
  // Send bandwidth: keep exactly this many receives posted per receive queue (a back-pressure
  // probe; fewer receives than messages in flight draw RNR NAKs). 0: rx_depth, as perftest.
  std::uint32_t posted_receives = 0;
  // Validating send: scatter each receive over this many pieces of the buffer, placed out of
  // address order, to check that one message fills them in order with one completion.
  std::uint32_t receive_sges = 1;
  // Bandwidth, write and read: both sides post at once (perftest's -b); the figures are the sum
  // of both directions, as perftest's print_full_bw_report adds the remote side's report.
  bool bidirectional = false;
  // Bandwidth: no peak figure (perftest's -N), sparing the run's end its search over every
  // post and completion time.
  bool no_peak = false;
  // Bandwidth: pace each side's posting to at most this rate; unset: as fast as it goes.
  std::optional<RateLimit> rate_limit;

  bool operator==(const ProbeSpec&) const = default;
};

// How the spec's QPs are connected, as a run reports it: "rdma_cm" or "qp_exchange".
std::string_view connected_by(const ProbeSpec& spec);

// What the validating side(s) of a run found. The coverage figures are reported next to the
// verdict so that a pass over a fraction of the messages is visible as such.
struct ValidationReport {
  std::uint64_t messages_sent = 0;      // messages the initiator generated
  std::uint64_t messages_received = 0;  // send: receive completions; write: messages seen
  std::uint64_t checked = 0;            // verified end to end (header, trailer, checksum)
  std::uint64_t errors = 0;             // corruption or broken send/receive semantics
  // Write: messages a later one overwrote before the receiver could verify them (data arrived
  // faster than it could be checked). checked + skipped_overwritten = messages_sent.
  std::uint64_t skipped_overwritten = 0;
  // Informational. races: checks abandoned because a newer message was landing in the slot;
  // rechecks: a check that failed while the data was still landing and passed on a re-read;
  // tail_checks: messages verified in the final pass after the initiator finished;
  // stale_completions: completions of an earlier connection, dropped.
  std::uint64_t races = 0;
  std::uint64_t rechecks = 0;
  std::uint64_t tail_checks = 0;
  std::uint64_t stale_completions = 0;
  std::string first_error;  // what, where (offset) and the bytes; empty without errors

  bool operator==(const ValidationReport&) const = default;
};

// perftest's defaults for ib_<operation>_<test>: bandwidth 64 KiB messages, tx depth 128,
// 5000 iterations for write (1000 for read, send and atomic); latency 2-byte messages, tx depth
// 1, 1000 iterations; atomics 8-byte messages (DEF_SIZE_ATOMIC), fetch-and-add. CQ moderation and
// inline size stay unset: perftest derives them (below).
ProbeSpec default_spec(Operation operation, TestKind test);

// An atomic's operand: perftest's DEF_SIZE_ATOMIC, the only size atomic probes take.
inline constexpr std::uint64_t kAtomicMessageSize = 8;

// perftest's CQ moderation (force_dependecies): the one given, else 100 (DEF_CQ_MOD), forced to
// 1 above 8 KiB (MSG_SIZE_CQ_MOD_LIMIT) except over UD, to the post list's size with a post list,
// and never above the tx depth. Latency ping-pongs signal every message.
std::uint32_t effective_cq_moderation(const ProbeSpec& spec);

// perftest's default inline size (ctx_set_max_inline): 0 on a device it does not recognise by
// vendor and part id (rxe and siw among them), and for bandwidth and read; for write latency
// 220 bytes, for send latency 236, with its per-vendor exceptions.
std::uint32_t perftest_default_inline(std::uint32_t vendor_id, std::uint32_t vendor_part_id,
                                      Operation operation, TestKind test,
                                      Connection connection = Connection::kRc);

// perftest's receive depth over UC and UD (force_dependecies): a send run in iteration mode that
// keeps the default 512 posts one receive per message instead, up to UC_MAX_RX (16000), so an
// unreliable connection loses no message for want of a receive; here at most `max_depth`, the
// responders' depth limit. Other runs keep `spec.rx_depth`.
std::uint32_t perftest_unreliable_rx_depth(const ProbeSpec& spec, std::uint32_t max_depth);

// The QP key of a UD probe's QPs and their peers' (perftest's DEF_QKEY).
inline constexpr std::uint32_t kProbeQkey = 0x11111111;
// Bytes a UD receive holds before the message: the GRH, present or not.
inline constexpr std::uint32_t kUdGrhBytes = 40;

// Why a spec (or a sweep, or a verify plan) cannot run: every rule it breaks, each message
// saying why, in the order the rules are checked.
struct SpecViolations {
  std::vector<std::string> problems;
  // The problems joined with "; ", as error messages show them.
  std::string message() const;
};

// A spec validate() accepted: the only way to get one, so a function taking it needs no check.
class ValidSpec {
 public:
  const ProbeSpec& spec() const { return spec_; }
  const ProbeSpec* operator->() const { return &spec_; }
  bool operator==(const ValidSpec&) const = default;

 private:
  explicit ValidSpec(ProbeSpec spec) : spec_(std::move(spec)) {}
  friend std::expected<ValidSpec, SpecViolations> validate(ProbeSpec spec);
  ProbeSpec spec_;
};

// The spec when it is consistent, else every rule it breaks.
std::expected<ValidSpec, SpecViolations> validate(ProbeSpec spec);

// Caps a responder enforces on peer-supplied numbers before it allocates anything.
struct Limits {
  std::uint64_t max_message_size = 8ull << 20;  // perftest's largest size with --all
  std::uint32_t max_depth = 8192;               // tx and rx depth
  std::uint32_t max_qps = 64;
  std::uint32_t max_duration_seconds = 120;
  // Iteration mode keeps two timestamps per message: iterations * qps * 16 bytes.
  std::uint64_t max_iterations = 1'000'000;
  std::uint64_t max_total_buffer_bytes = 1ull << 30;  // qps * max(tx, rx depth) * message size
  // How long a peer may hold this side's QPs, buffers and port gate: the longest run plus time
  // for its setup and counter reads.
  std::uint32_t max_timeout_seconds = 180;
  // The verification suite's soak, and nothing else, may run past max_duration_seconds up to
  // this, its timeout past max_timeout_seconds by as much: a responder's explicit choice, the
  // default keeps the soak under the same cap.
  std::uint32_t max_soak_seconds = 120;
};

// Every limit the spec exceeds, unless it fits. Overflow-safe for any input.
std::expected<void, SpecViolations> check_limits(const ProbeSpec& spec, const Limits& limits);

// Both checks, as a responder applies them to a peer's spec: the spec when it is consistent and
// fits, else the rules it breaks followed by the limits it exceeds.
std::expected<ValidSpec, SpecViolations> validate_within(ProbeSpec spec, const Limits& limits);

// The spec's lane fields out of their range (sl 0..15, traffic_class 0..255, pkey_index
// 0..65535, dlid 1..0xBFFF), one message each; validate() includes them.
std::vector<std::string> lane_problems(const ProbeSpec& spec);

// Why entry `pkey_index` of a P_Key table of `table_entries` entries cannot be used (absent, or
// empty): the one wording of the sysfs check below and of the verbs side's ibv_query_pkey.
std::string lane_pkey_problem(std::uint32_t pkey_index, int table_entries);

// The spec's P_Key index against the port's table in sysfs
// (<sysfs_root>/class/infiniband/<device>/ports/<port>/pkeys/<index>: it must exist and hold a
// non-zero P_Key), before anything is allocated. Index 0, perftest's default, is not checked:
// a run without pkey_index does what it always did.
std::expected<void, std::string> check_pkey_index(const std::filesystem::path& sysfs_root,
                                                  const std::string& device, std::uint8_t port,
                                                  std::uint32_t pkey_index);

// A destination LID only where LIDs route: the port's link layer
// (<sysfs_root>/class/infiniband/<device>/ports/<port>/link_layer) must be InfiniBand. No dlid
// is not checked.
std::expected<void, std::string> check_dlid(const std::filesystem::path& sysfs_root,
                                            const std::string& device, std::uint8_t port,
                                            std::optional<std::uint32_t> dlid);

// Both port checks of the spec's lane (P_Key index, then destination LID), as the CLI and the
// API apply them before a run is queued: the first problem found.
std::expected<void, std::string> check_lane_on_port(const std::filesystem::path& sysfs_root,
                                                    const std::string& device, std::uint8_t port,
                                                    const ProbeSpec& spec);

// ---------------------------------------------------------------------------------------------
// Statistics (perftest semantics; see stats.cpp for the exact formulas and their source)

// Nanoseconds from a monotonic clock. perftest reads the CPU cycle counter and divides by the
// CPU's MHz; a steady clock in nanoseconds needs no frequency calibration.
using TimestampNs = std::uint64_t;
TimestampNs steady_now_ns();

// One-way latency: round trip / 2 for write and send; read and atomic are reported unhalved, as
// perftest does (rtt_factor 1). n = samples kept after dropping the two largest, d = all samples
// sorted. Upper bounds of a latency run's histogram, in ns: 1 us to 10 ms, 1-2-5 per decade, from
// RDMA's single microseconds to a congested or emulated path's milliseconds.
inline constexpr std::array<double, 13> kLatencyHistogramBoundsNs = {
    1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6, 2e6, 5e6, 1e7};

struct LatencyStats {
  std::size_t samples = 0;  // n
  double min_ns = 0;
  double max_ns = 0;      // perftest's t_max, d[n]: the second largest sample of the run
  double typical_ns = 0;  // median of the kept samples: the baseline, it resists warm-up outliers
  double average_ns = 0;
  double stdev_ns = 0;  // population deviation; perftest's truncates to whole microseconds
  double p99_ns = 0;    // d[ceil(n * 0.99)]
  double p99_9_ns = 0;  // d[ceil(n * 0.999)]
  // The distribution of the same n samples (perftest's -H prints one): how many were at most
  // each bound of kLatencyHistogramBoundsNs, cumulative, and their sum.
  std::array<std::uint64_t, kLatencyHistogramBoundsNs.size()> histogram_counts{};
  double sum_ns = 0;
};

// From the post time of every ping-pong iteration, in order: sample i = t[i+1] - t[i].
// Throws std::invalid_argument when fewer than 4 timestamps leave no sample after the two
// dropped ones, or when the timestamps go backwards.
LatencyStats latency_stats(std::span<const TimestampNs> post_times, Operation operation);

// Duration-mode latency: perftest keeps no per-iteration samples there, only the average.
struct DurationLatencyStats {
  std::uint64_t iterations = 0;
  double average_ns = 0;
  double transactions_per_second = 0;
};
DurationLatencyStats duration_latency_stats(TimestampNs sample_start, TimestampNs sample_end,
                                            std::uint64_t iterations, Operation operation);

struct BandwidthStats {
  std::uint64_t messages = 0;
  double seconds = 0;  // last completion - first post, or the duration-mode sample window
  double bytes_per_second = 0;
  double messages_per_second = 0;
  // Best per-message time over every post/completion pair perftest considers. Unset in duration
  // mode (perftest turns it off there), above kPeakMaxIterations, with no_peak, or with a zero
  // time.
  std::optional<double> peak_bytes_per_second;

  bool operator==(const BandwidthStats&) const = default;
};

// The sum of both directions of a bidirectional run, as perftest's print_full_bw_report adds
// the remote side's BW average, peak and message rate to its own (the message count stays the
// initiator's, as perftest prints its own iterations).
BandwidthStats combine_directions(const BandwidthStats& initiator, const BandwidthStats& responder);

// perftest's report units: MiB/s (2^20 bytes) by default, decimal Gbit/s with --report_gbits.
double mebibytes_per_second(double bytes_per_second);
double gigabits_per_second(double bytes_per_second);

// perftest skips its quadratic peak search when a run has more iterations per QP than this.
inline constexpr std::uint64_t kPeakMaxIterations = 20000;

// Iteration mode, for a bandwidth spec with iterations set. posted[i] is the post time of
// message i (read at post-list heads only), completed[j] the time its completion was seen (read
// only at every cq_moderation-th entry and the last, where perftest stores them). Both hold
// iterations * qps entries. Throws std::invalid_argument on a spec without iterations, sizes
// that do not match it, or a last completion not after the first post.
BandwidthStats bandwidth_stats(std::span<const TimestampNs> posted,
                               std::span<const TimestampNs> completed, const ProbeSpec& spec);

// Duration mode: messages completed between the end of the warm-up margin and the start of the
// cool-down margin. Throws std::invalid_argument when the window is empty.
BandwidthStats bandwidth_stats_duration(TimestampNs sample_start, TimestampNs sample_end,
                                        std::uint64_t messages, std::uint64_t message_size);

// ---------------------------------------------------------------------------------------------
// Counter deltas

using ibprobe::CounterSample;
using ibprobe::CounterSnapshot;

enum class DeltaStatus {
  kValid,
  kReset,      // went down: someone reset it during the window; the delta is unknown
  kSaturated,  // at all ones before or after: the delta is unknown
  kMissing,    // in only one of the two snapshots
};
std::string_view to_string(DeltaStatus status);

struct CounterDelta {
  std::string counter;
  DeltaStatus status = DeltaStatus::kValid;
  std::optional<double> delta;  // scaled (bytes for the data counters); only when kValid
  bool error_class = false;
  std::string counter_class;                             // as in CounterSample
  std::optional<std::uint32_t> priority = std::nullopt;  // as in CounterSample

  bool operator==(const CounterDelta&) const = default;
};

// One delta per counter name found in either snapshot, in name order.
std::vector<CounterDelta> counter_deltas(const CounterSnapshot& before,
                                         const CounterSnapshot& after);

// docs/reading-probes.md: what the probe bandwidth and the sending port's counters say together.
enum class Diagnosis {
  kInconclusive,          // a needed reading is missing, reset or saturated
  kLinkSaturated,         // BW ~ line rate: expected ceiling
  kHostSideBottleneck,    // BW << rate, no transmit wait: posting or receiver side
  kCreditsOrArbitration,  // BW << rate, transmit wait rising: switch buffers, VL arbitration
  kAggregatedPath,        // BW > rate: bidirectional or dual port, the port rate is no reference
  kExtraLinkTraffic,      // link carried much more than the probe: retransmission or other traffic
};
std::string_view to_string(Diagnosis diagnosis);

struct DiagnosisThresholds {
  double saturated_ratio = 0.9;  // BW / rate at or above which the link counts as full
  double aggregated_ratio = 1.05;
  // Link bytes / probe bytes above which the port carried more than the probe. Headers alone
  // add a few percent (more with small MTUs), hence the margin.
  double extra_traffic_ratio = 1.25;
  double wait_ticks = 1;  // transmit-wait delta at or above which waiting "rises"
};

struct LinkReading {
  std::optional<double> link_bytes_per_second;    // data-counter delta / window
  std::optional<double> line_rate_ratio;          // probe BW / line rate
  std::vector<std::string> moved_error_counters;  // error-class counters that rose or are unknown
  // RNR counters, and the retransmissions and sequence errors of the go-back-N they cause, that
  // rose while the probe itself starved the receiver (posted receives below the messages in
  // flight): the probe's own back-pressure, not a finding about the fabric.
  std::vector<std::string> probe_backpressure_counters;
  Diagnosis diagnosis = Diagnosis::kInconclusive;
  std::string explanation;
};

// `sender` holds the deltas of the port that transmitted the probe's data (the initiator for
// write and send, the responder for read); its port_xmit_data and port_xmit_wait are read.
// `all_sides` are every delta seen during the run (names qualified by side, "peer:..."), scanned
// for moved error counters. `own_backpressure`, when set, says why the probe starved its own
// receiver (see own_backpressure()): when RNR-class counters rose, they and the go-back-N they
// cause (retransmission and sequence_error classes) are put apart from the findings, in
// probe_backpressure_counters. Other error classes (remote errors, out of buffer, ACK timeouts,
// PortCounters errors) stay findings.
LinkReading read_link(double window_seconds, double probe_bytes_per_second,
                      double line_rate_bytes_per_second, const std::vector<CounterDelta>& sender,
                      const std::vector<CounterDelta>& all_sides,
                      const DiagnosisThresholds& thresholds = {},
                      const std::optional<std::string>& own_backpressure = std::nullopt);

// Classes of the counters a receiver starved of posted receives moves: RNR NAKs sent and
// received, and RNR retries used up.
bool is_rnr_class(std::string_view counter_class);

// Why a spec starves its receiver on purpose, or nothing: a send probe that keeps fewer receives
// posted (posted_receives) than it has messages in flight (tx_depth) draws RNR NAKs by design.
std::optional<std::string> own_backpressure(const ProbeSpec& spec);

}  // namespace ibprobe::probes

// The two-sided verification suite, its hardware-free half: the cases (Send/Recv exchanges
// broken on purpose - a late receiver, failed work requests, a peer that loses its QP, buffers
// overwritten in flight - as well as positive paths), their options, the seeded size sequences,
// the soak's figures and the table. ibprobe/verify.h runs them.
#pragma once

#include <array>
#include <cstdint>
#include <expected>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ibprobe/probes.h"

namespace ibprobe::probes::verify {

enum class Case {
  kDelayedRecv,
  kRnrRetryExceeded,
  kLocalErrorMrLength,
  kLocalErrorLkey,
  kLocalErrorUnmapped,
  kLocalErrorMaxSge,
  kQpRebuild,
  kInlineReuse,
  kBidirectional,
  kRandomSizes,
  kAtomics,
  kUdDatagrams,
  kSoak,
};

struct CaseInfo {
  Case id;
  std::string_view name;
  // What the case checks and what it takes to pass, as printed in the table.
  std::string_view checks;
};

// Every case, in the order a full run takes them.
const std::vector<CaseInfo>& catalogue();
const CaseInfo& info(Case id);

// The cases named (in catalogue order, each once), or all of them when none is named. Throws
// std::invalid_argument naming an unknown case and listing the known ones.
std::vector<Case> select_cases(const std::vector<std::string>& names);

struct Options {
  // Messages per case (delayed_recv, qp_rebuild, bidirectional per side, random_sizes, the
  // healthy QP of the local-error cases).
  std::uint32_t messages = 200;
  // delayed_recv: how long the receiver holds back each re-post.
  std::uint32_t recv_delay_ms = 20;
  // random_sizes: sizes from 1 byte to max_message_size, drawn from `seed`; with fixed_sizes
  // the boundary sizes in a fixed order instead.
  std::uint64_t seed = 1;
  bool fixed_sizes = false;
  std::uint64_t max_message_size = 65536;
  // qp_rebuild: the responder destroys its QP after this many messages.
  std::uint32_t rebuild_after = 50;
  // inline_reuse: the inline size asked of the QP (the device may give less, or none).
  std::uint32_t inline_size = 128;
  // soak: length and reporting interval. Past Limits::max_duration_seconds only when the
  // responder's Limits::max_soak_seconds allows it.
  std::uint32_t soak_seconds = 30;
  std::uint32_t soak_interval_seconds = 5;
  // soak: message size; the default fits one packet at a 1024-byte path MTU.
  std::uint64_t soak_message_size = 1024;
  // Longest a case may take, connection to release (the soak: its length on top).
  std::uint32_t case_timeout_seconds = 60;
};

// Options validate() accepted for the cases they run with: the form run_verify takes.
class ValidPlan {
 public:
  const Options& options() const { return options_; }
  const std::vector<Case>& cases() const { return cases_; }

 private:
  ValidPlan(Options options, std::vector<Case> cases)
      : options_(options), cases_(std::move(cases)) {}
  friend std::expected<ValidPlan, SpecViolations> validate(Options options,
                                                           std::vector<Case> cases);
  Options options_;
  std::vector<Case> cases_;
};

// The plan when the options are consistent for `cases` (none: the rules of every case), else
// every rule they break, each message saying why. An option only one case reads is checked only
// when that case runs.
std::expected<ValidPlan, SpecViolations> validate(Options options, std::vector<Case> cases = {});

// Seeded message sizes in [1, max]: the same seed gives the same sequence on every host and
// build (splitmix64, no standard-library distribution whose output may differ between
// implementations). The fixed sequence is the boundary sizes (1, 2, 63, 64, 65, 4095, 4096,
// 4097, max - 1, max) that fit, cycled.
class SizeSequence {
 public:
  SizeSequence(std::uint64_t seed, std::uint64_t max, bool fixed);
  std::uint64_t size(std::uint64_t index) const;

 private:
  std::uint64_t seed_;
  std::uint64_t max_;
  std::vector<std::uint64_t> fixed_;
};

// Byte i of message `sequence` in a random-sizes run: both ends compute it, so the receiver checks
// every byte of a message of any length, one byte long included.
std::uint8_t pattern_byte(std::uint64_t seed, std::uint64_t sequence, std::uint64_t offset);

enum class Verdict { kPass, kFail, kSkipped };
std::string_view to_string(Verdict verdict);

struct CaseResult {
  Case id;
  Verdict verdict = Verdict::kFail;
  double seconds = 0;
  // Fail: the evidence (CQE status and vendor error, QP state, CQ depth, last wr_ids). Skipped:
  // the reason. Pass: what was observed, for the record.
  std::vector<std::string> details;
};

// The suite's table: one row per case (name, result, seconds, what is checked), its details
// indented under it, and a summary line.
std::string format_table(const std::vector<CaseResult>& results);

// Soak figures, hardware-free so the reading of them is tested without a device.
// Non-empty polls by CQEs returned: 1, 2-3, 4-7, 8-15, 16 and more.
struct BatchHistogram {
  std::array<std::uint64_t, 5> buckets{};
  void add(int cqes);
  std::string describe() const;
};

struct SoakInterval {
  double seconds = 0;             // length of the interval
  std::uint64_t completions = 0;  // successful CQEs reaped in it (both directions)
  std::uint64_t max_backlog = 0;  // largest number of CQEs one drain of the CQ found
  double mean_backlog = 0;        // CQEs per drain that found any
};

// A backlog that grows: over at least four intervals, every interval of the second half drains,
// on average, more than twice the first half's mean, and the last more than one poll batch (16).
// A steady load that merely fills a batch now and then is not flagged, nor is one interval in
// which the poller was held up (a stalled guest) while the ones around it drained as before.
bool backlog_grows(const std::vector<SoakInterval>& intervals);

}  // namespace ibprobe::probes::verify

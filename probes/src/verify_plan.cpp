// The hardware-free half of the verification suite: which cases exist and what each one checks,
// the options' rules, the size sequences, the soak's figures and the table.
#include "ibprobe/verify_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "ibprobe/enum_names.h"

namespace ibprobe::probes::verify {
namespace {

std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ull;
constexpr std::uint32_t kMaxRecvDelayMs = 1000;
constexpr std::uint32_t kMaxMessages = 100000;

constexpr EnumNames<Verdict, 3> kVerdictNames{
    {{Verdict::kPass, "pass"}, {Verdict::kFail, "FAIL"}, {Verdict::kSkipped, "skipped"}}};

}  // namespace

const std::vector<CaseInfo>& catalogue() {
  static const std::vector<CaseInfo> cases = {
      {Case::kDelayedRecv, "delayed_recv",
       "receiver re-posts each receive late: RNR NAKs counted (> 0) and every message arrives, "
       "in order, intact"},
      {Case::kRnrRetryExceeded, "rnr_retry_exceeded",
       "rnr_retry 0, receiver posts nothing: the sender's CQE is IBV_WC_RNR_RETRY_EXC_ERR and its "
       "QP is in ERR"},
      {Case::kLocalErrorMrLength, "local_error_mr_length",
       "send longer than its MR: error CQE (not success), QP in ERR, async event reported; the "
       "healthy QP on the same CQ completes every message"},
      {Case::kLocalErrorLkey, "local_error_lkey",
       "send with an invalid lkey: error CQE, QP in ERR, async event reported; the healthy QP on "
       "the same CQ completes every message"},
      {Case::kLocalErrorUnmapped, "local_error_unmapped",
       "send from an unmapped address: error CQE, QP in ERR, async event reported; the healthy QP "
       "on the same CQ completes every message"},
      {Case::kLocalErrorMaxSge, "local_error_max_sge",
       "send with more SGEs than max_send_sge: refused by ibv_post_send (EINVAL) or an error CQE "
       "with the QP in ERR; the healthy QP on the same CQ completes every message"},
      {Case::kQpRebuild, "qp_rebuild",
       "peer destroys its QP mid-run: error CQE seen, QP rebuilt on the same CQ with a new "
       "generation, old-generation CQEs dropped and counted (> 0), every message delivered once "
       "in order"},
      {Case::kInlineReuse, "inline_reuse",
       "inline sends overwritten right after ibv_post_send: the peer sees every pre-overwrite "
       "message; above the inline size the peer's view of an overwritten buffer is reported"},
      {Case::kBidirectional, "bidirectional",
       "both ends send and receive at once on one QP pair: no deadlock, every message verified "
       "on both sides"},
      {Case::kRandomSizes, "random_sizes",
       "seeded sizes from 1 byte to the MR size: every byte_len equals the size sent and every "
       "byte is checked"},
      {Case::kAtomics, "atomics",
       "fetch-and-adds to one target fetch 0, 1, 2, ... in order; a compare-and-swap with a "
       "stale compare fetches the current value and swaps nothing, with the current one it "
       "swaps; the target read back holds what the swap wrote"},
      {Case::kUdDatagrams, "ud_datagrams",
       "path-MTU UD datagrams, a window of posted receives at a time: each arrives whole behind "
       "its 40-byte GRH (the GRH flag set, byte_len = size + 40, the sender's address in it, the "
       "sender's QP number), every byte and the order checked, none lost"},
      {Case::kSoak, "soak",
       "validating send/recv for the soak time: no error, completions/s per interval, CQE batch "
       "distribution, CQ backlog not growing"},
  };
  return cases;
}

const CaseInfo& info(Case id) {
  for (const auto& c : catalogue()) {
    if (c.id == id) return c;
  }
  throw std::logic_error("verify case without a catalogue entry");
}

std::vector<Case> select_cases(const std::vector<std::string>& names) {
  std::vector<bool> wanted(catalogue().size(), names.empty());
  for (const auto& name : names) {
    const auto it = std::find_if(catalogue().begin(), catalogue().end(),
                                 [&](const CaseInfo& c) { return c.name == name; });
    if (it == catalogue().end()) {
      std::string known;
      for (const auto& c : catalogue()) known += (known.empty() ? "" : ", ") + std::string(c.name);
      throw std::invalid_argument("unknown verify case '" + name + "' (cases: " + known + ")");
    }
    wanted[static_cast<std::size_t>(it - catalogue().begin())] = true;
  }
  std::vector<Case> cases;
  for (std::size_t i = 0; i < wanted.size(); ++i) {
    if (wanted[i]) cases.push_back(catalogue()[i].id);
  }
  return cases;
}

std::expected<ValidPlan, SpecViolations> validate(Options o, std::vector<Case> cases) {
  const bool rebuilds =
      cases.empty() || std::find(cases.begin(), cases.end(), Case::kQpRebuild) != cases.end();
  // One row per option: its value, the range it must fall in, and the message when it does not.
  struct Bound {
    bool applies;
    std::uint64_t value, min, max;
    std::string message;
  };
  constexpr auto kUnbounded = std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t last_before_end = o.messages > 1 ? o.messages - 1 : 0;
  const Bound bounds[] = {
      {true, o.messages, 1, kMaxMessages,
       fmt::format("messages must be 1..{}, not {}", kMaxMessages, o.messages)},
      {true, o.recv_delay_ms, 1, kMaxRecvDelayMs,
       fmt::format("recv delay must be 1..{} ms, not {}", kMaxRecvDelayMs, o.recv_delay_ms)},
      // The random-sizes messages land in receives of the whole slot, which the responder's
      // Limits::max_message_size bounds; below 64 bytes nothing is left to draw from.
      {true, o.max_message_size, 64, kUnbounded,
       fmt::format("max message size must be 64 bytes at least, not {}", o.max_message_size)},
      {rebuilds, o.rebuild_after, 1, last_before_end,
       fmt::format("rebuild_after must be 1..messages-1 ({}), not {}", last_before_end,
                   o.rebuild_after)},
      {true, o.inline_size, 64, kUnbounded,
       fmt::format("inline size must be 64 bytes at least (a checked message's header and "
                   "trailer), not {}",
                   o.inline_size)},
      {true, o.soak_seconds, 1, kUnbounded, "soak time must be 1 s at least"},
      {true, o.soak_interval_seconds, 1, o.soak_seconds,
       fmt::format("soak interval must be 1..{} s (the soak time), not {}", o.soak_seconds,
                   o.soak_interval_seconds)},
      {true, o.soak_message_size, 64, kUnbounded,
       fmt::format("soak message size must be 64 bytes at least, not {}", o.soak_message_size)},
      {true, o.case_timeout_seconds, 5, kUnbounded, "case timeout must be 5 s at least"},
  };
  std::vector<std::string> problems;
  for (const auto& bound : bounds) {
    if (bound.applies && (bound.value < bound.min || bound.value > bound.max)) {
      problems.push_back(bound.message);
    }
  }
  if (!problems.empty()) return std::unexpected(SpecViolations{std::move(problems)});
  return ValidPlan(o, std::move(cases));
}

SizeSequence::SizeSequence(std::uint64_t seed, std::uint64_t max, bool fixed)
    : seed_(seed), max_(max) {
  if (max == 0) throw std::invalid_argument("a size sequence needs a maximum of 1 byte at least");
  if (!fixed) return;
  for (std::uint64_t size :
       {1ull, 2ull, 63ull, 64ull, 65ull, 4095ull, 4096ull, 4097ull,
        static_cast<unsigned long long>(max - 1), static_cast<unsigned long long>(max)}) {
    if (size >= 1 && size <= max && std::find(fixed_.begin(), fixed_.end(), size) == fixed_.end()) {
      fixed_.push_back(size);
    }
  }
}

std::uint64_t SizeSequence::size(std::uint64_t index) const {
  if (!fixed_.empty()) return fixed_[index % fixed_.size()];
  return 1 + mix(seed_ + (index + 1) * kGolden) % max_;
}

std::uint8_t pattern_byte(std::uint64_t seed, std::uint64_t sequence, std::uint64_t offset) {
  const std::uint64_t word = mix(mix(seed ^ (sequence * kGolden)) + (offset / 8) * kGolden);
  return static_cast<std::uint8_t>(word >> (8 * (offset % 8)));
}

std::string_view to_string(Verdict verdict) {
  return name_of(kVerdictNames, verdict, "FAIL");
}

std::string format_table(const std::vector<CaseResult>& results) {
  constexpr int kNameWidth = 22, kVerdictWidth = 8;
  std::string out = fmt::format("{:<{}} {:<{}} {:>8}  {}\n", "case", kNameWidth, "result",
                                kVerdictWidth, "seconds", "what is checked (pass criterion)");
  int passed = 0, failed = 0, skipped = 0;
  for (const auto& r : results) {
    const auto& c = info(r.id);
    out += fmt::format("{:<{}} {:<{}} {:>8.1f}  {}\n", c.name, kNameWidth, to_string(r.verdict),
                       kVerdictWidth, r.seconds, c.checks);
    const char* label = r.verdict == Verdict::kFail      ? "evidence"
                        : r.verdict == Verdict::kSkipped ? "reason"
                                                         : "observed";
    for (const auto& detail : r.details) {
      out += fmt::format("{:<{}}   {}: {}\n", "", kNameWidth + kVerdictWidth + 8, label, detail);
    }
    (r.verdict == Verdict::kPass ? passed : r.verdict == Verdict::kFail ? failed : skipped) += 1;
  }
  out += fmt::format("verify: {} cases, {} passed, {} failed, {} skipped\n", results.size(), passed,
                     failed, skipped);
  return out;
}

void BatchHistogram::add(int cqes) {
  if (cqes <= 0) return;
  const std::size_t bucket = cqes >= 16 ? 4 : cqes >= 8 ? 3 : cqes >= 4 ? 2 : cqes >= 2 ? 1 : 0;
  ++buckets[bucket];
}

std::string BatchHistogram::describe() const {
  static constexpr const char* kNames[] = {"1", "2-3", "4-7", "8-15", "16+"};
  const std::uint64_t total = std::accumulate(buckets.begin(), buckets.end(), std::uint64_t{0});
  std::string out;
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    out += fmt::format("{}{}:{} ({:.1f}%)", i ? " " : "", kNames[i], buckets[i],
                       total ? 100.0 * static_cast<double>(buckets[i]) / total : 0.0);
  }
  return out;
}

bool backlog_grows(const std::vector<SoakInterval>& intervals) {
  constexpr double kOneBatch = 16;
  constexpr std::size_t kFewestIntervals = 4;
  if (intervals.size() < kFewestIntervals) return false;
  const std::size_t half = intervals.size() / 2;
  double first_half = 0;
  for (std::size_t i = 0; i < half; ++i) first_half += intervals[i].mean_backlog;
  first_half /= static_cast<double>(half);
  const bool every_later_interval_doubled = std::all_of(
      intervals.begin() + static_cast<std::ptrdiff_t>(intervals.size() - half), intervals.end(),
      [&](const SoakInterval& i) { return i.mean_backlog > 2 * first_half; });
  return every_later_interval_doubled && intervals.back().mean_backlog > kOneBatch;
}

}  // namespace ibprobe::probes::verify

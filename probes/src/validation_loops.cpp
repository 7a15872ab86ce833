// The data loops of correctness probes: the initiator fills every message with a header and a
// checksummed pseudo-random payload (payload.h), the receiving side verifies it. Send: every
// receive completion is checked before its receive is posted again, with send/receive semantics
// (one completion per send, byte_len, continuous sequence, scattered pieces filled in order).
// Write: the responder's CPU never learns when a write lands, so it polls its slots and counts
// what it could not check instead of claiming it.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <limits>
#include <optional>
#include <thread>

#include "payload.h"
#include "rc_session.h"

namespace ibprobe::probes {
namespace {

using Clock = std::chrono::steady_clock;

using verbs::kPollBatch;
constexpr std::uint64_t kNone = std::numeric_limits<std::uint64_t>::max();
// Slot scans between looks at the control connection while the writes stream in.
constexpr unsigned kScansPerPeerCheck = 64;
// Spins before a failed write check is looked at again: long enough for a message still being
// placed to finish landing.
constexpr unsigned kRecheckSpins = 20000;

void check_guard(const RunGuard& guard, const std::string& waiting_for) {
  if (guard.check_peer) guard.check_peer();
  if (Clock::now() > guard.deadline) {
    throw ProbeFailure("timed out waiting for " + waiting_for, FailureKind::kTimeout);
  }
}

// Keeps the compiler from caching reads of memory the HCA writes behind its back. A compiler
// barrier is what is needed (DMA writes are cache-coherent on the hosts this runs on), and unlike
// a thread fence it is understood by ThreadSanitizer.
void hca_barrier() {
  std::atomic_signal_fence(std::memory_order_seq_cst);
}

}  // namespace

void RcSession::record_error(const std::string& what) {
  constexpr std::uint64_t kLoggedErrors = 16;  // enough to see a pattern, not a flood
  if (validation_.errors < kLoggedErrors) spdlog::debug("probe validation error: {}", what);
  if (validation_.errors++ == 0) validation_.first_error = what;
}

// Each QP's atomics executed in order at the peer, so target t of a QP that posted n atomics
// received n / T of them, one more for t < n mod T, and holds their count: a fetch-and-add adds
// 1, a validating compare-and-swap swaps k for k + 1 only when it finds k. A target that holds
// anything else lost, repeated or reordered an atomic.
void RcSession::check_atomic_targets(const RunGuard& guard) {
  ibv_wc wc{};
  for (std::size_t q = 0; q < qps_.size(); ++q) {
    const std::uint64_t posted = atomics_posted(q);
    validation_.messages_sent += posted;
    post_atomic_read_back(q);
    for (unsigned spins = 1; poll(&wc, 1) == 0; ++spins) {
      if (clock_check_due(spins))
        check_guard(guard, "the atomic targets of QP " + std::to_string(q));
    }
    const auto values = atomic_targets_read_back(q);
    for (std::size_t t = 0; t < values.size(); ++t) {
      const std::uint64_t expected = posted / kAtomicTargets + (t < posted % kAtomicTargets);
      if (values[t] == expected) {
        validation_.checked += expected;
        continue;
      }
      record_error("QP " + std::to_string(q) + " target " + std::to_string(t) + " (offset " +
                   std::to_string(t * kAtomicTargetStride) + ") holds " +
                   std::to_string(values[t]) + " after " + std::to_string(expected) + " " +
                   std::string(to_string(spec_.atomic_type)) + " operations, expected " +
                   std::to_string(expected));
    }
  }
  validation_.messages_received = validation_.messages_sent;
}

void RcSession::post_validated(std::size_t qp, std::uint64_t sequence, bool signaled) {
  const bool send = spec_.operation == Operation::kSend;
  std::uint8_t* message = send_slot(qp, sequence % send_slots_);
  const std::span<std::uint8_t> bytes(message, spec_.message_size);
  payload::fill(bytes, static_cast<std::uint16_t>(qp), generation_, sequence);
  if (corrupt_every_ > 0 && (sequence + 1) % corrupt_every_ == 0) {
    payload::flip_byte_after_checksum(bytes, sequence);
  }
  ibv_sge sge = message_at(message);
  ibv_send_wr wr{};
  wr.wr_id = payload::encode_wr_id(
      {static_cast<std::uint16_t>(qp), generation_, static_cast<std::uint32_t>(sequence)});
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = send ? IBV_WR_SEND : IBV_WR_RDMA_WRITE;
  wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
  if (spec_.message_size <= inline_size_) wr.send_flags |= IBV_SEND_INLINE;
  if (!send) {
    wr.wr.rdma.remote_addr = peers_[qp].addr + (sequence % receive_slots_) * spec_.message_size;
    wr.wr.rdma.rkey = peers_[qp].rkey;
  }
  ibv_send_wr* bad = nullptr;
  ++post_calls_;
  if (const int rc = ibv_post_send(qps_[qp].get(), &wr, &bad); rc != 0) {
    throw verbs::VerbsError("ibv_post_send", rc);
  }
}

// perftest's bandwidth loop with a filled message per post: up to tx_depth messages in flight
// per QP, a completion asked for every cq_moderation messages. A completion frees the slots of
// every message up to its own (RC completes in order), and only then are they filled again.
BandwidthStats RcSession::run_bandwidth_validated(const RunGuard& guard) {
  const bool counted = spec_.iterations.has_value();
  const std::uint64_t per_qp = counted ? *spec_.iterations : 0;
  const std::uint64_t total = per_qp * qps_.size();
  std::optional<DurationWindow> window;
  if (!counted) window.emplace(spec_);
  const auto expected_opcode =
      spec_.operation == Operation::kSend ? IBV_WC_SEND : IBV_WC_RDMA_WRITE;
  struct QpState {
    std::uint64_t sent = 0;
    std::uint64_t done = 0;
    std::uint64_t unsignaled = 0;
    std::deque<std::uint64_t> signaled;  // sequences whose completion is outstanding, in order
  };
  std::vector<QpState> state(qps_.size());
  std::vector<TimestampNs> posted(total), completed(total);
  std::uint64_t total_sent = 0, total_done = 0;
  ibv_wc wcs[kPollBatch];
  for (unsigned spins = 1;; ++spins) {
    const bool posting = !window || window->posting(total_done);
    bool outstanding = false;
    for (std::size_t q = 0; q < qps_.size(); ++q) {
      auto& s = state[q];
      for (;;) {
        if (s.sent - s.done >= spec_.tx_depth) break;
        if (counted ? s.sent >= per_qp : (!posting && s.unsignaled == 0)) break;
        const bool signaled = counted ? (s.sent + 1) % cq_moderation_ == 0 || s.sent + 1 == per_qp
                                      : !posting || s.unsignaled + 1 == cq_moderation_;
        if (counted) posted[total_sent] = steady_now_ns();
        post_validated(q, s.sent, signaled);
        ++total_sent;
        ++s.unsignaled;
        if (signaled) {
          s.signaled.push_back(s.sent);
          s.unsignaled = 0;
        }
        ++s.sent;
      }
      outstanding = outstanding || s.done < s.sent;
    }
    if (counted ? total_done >= total : (!posting && !outstanding)) break;
    const int n = poll(wcs, kPollBatch);
    const TimestampNs now = n > 0 ? steady_now_ns() : 0;
    for (int i = 0; i < n; ++i) {
      const auto id = payload::decode_wr_id(wcs[i].wr_id);
      if (id.generation != generation_ || id.qp >= qps_.size()) {
        ++validation_.stale_completions;
        continue;
      }
      auto& s = state[id.qp];
      if (s.signaled.empty()) {
        record_error("a completion on QP " + std::to_string(id.qp) + " for sequence " +
                     std::to_string(id.sequence) + " with nothing outstanding");
        continue;
      }
      const std::uint64_t sequence = s.signaled.front();
      s.signaled.pop_front();
      if (id.sequence != static_cast<std::uint32_t>(sequence) || wcs[i].opcode != expected_opcode) {
        record_error("completion on QP " + std::to_string(id.qp) + " for sequence " +
                     std::to_string(id.sequence) + " (opcode " + std::to_string(wcs[i].opcode) +
                     "), expected sequence " + std::to_string(sequence));
      }
      const std::uint64_t batch = sequence + 1 - s.done;
      s.done = sequence + 1;
      total_done += batch;
      if (counted) completed[total_done - 1] = now;
    }
    if (n == 0 && clock_check_due(spins)) {
      check_guard(guard, "completions of a validating run (" + std::to_string(total_done) +
                             " messages done, " + std::to_string(total_sent - total_done) +
                             " in flight)");
    }
  }
  validation_.messages_sent = total_sent;
  if (counted) return bandwidth_stats(posted, completed, spec_);
  return window->stats(spec_.message_size);
}

// Every receive completion is verified before its receive goes back on the queue, so a slot is
// never overwritten while it is being checked.
void RcSession::serve_send_validated(const RunGuard& guard) {
  const bool counted = spec_.iterations.has_value();
  const std::uint64_t expected = counted ? *spec_.iterations * qps_.size() : 0;
  const std::size_t size = spec_.message_size;
  const std::uint32_t pieces = spec_.receive_sges;
  std::vector<std::uint64_t> next_sequence(qps_.size(), 0);
  std::vector<int> peer_generation(qps_.size(), -1);
  std::vector<std::uint8_t> gathered(pieces > 1 ? size : 0);
  ibv_wc wcs[kPollBatch];
  std::uint64_t received = 0;
  // Duration mode: the initiator's last sends were acknowledged before it said so, but their
  // receive completions may still be on their way to our CQ; they count until the CQ stays quiet.
  bool draining = false;
  auto quiet_since = Clock::now();
  for (unsigned spins = 1; !counted || received < expected; ++spins) {
    const int n = poll(wcs, kPollBatch);
    if (draining) {
      if (n > 0) quiet_since = Clock::now();
      if (n == 0 && Clock::now() - quiet_since > kDrainQuiet) return;
    }
    for (int c = 0; c < n; ++c) {
      const ibv_wc& wc = wcs[c];
      const auto id = payload::decode_wr_id(wc.wr_id);
      if (id.generation != generation_) {
        ++validation_.stale_completions;
        continue;
      }
      ++received;
      ++validation_.messages_received;
      std::size_t from = qps_.size();
      for (std::size_t q = 0; q < qps_.size(); ++q) {
        if (qps_[q]->qp_num == wc.qp_num) from = q;
      }
      const std::size_t queue = srq_ ? 0 : id.qp;
      std::span<const std::uint8_t> message(receive_slot(queue, id.sequence), size);
      if (pieces > 1) {
        for (std::uint32_t k = 0; k < pieces; ++k) {
          const Piece p = piece(size, pieces, k);
          std::memcpy(gathered.data() + p.message_offset,
                      receive_slot(queue, id.sequence) + p.slot_offset, p.length);
        }
        message = gathered;
      }
      const std::string where = "receive on QP " + std::to_string(from);
      if (wc.opcode != IBV_WC_RECV) {
        record_error(where + ": opcode " + std::to_string(wc.opcode) + ", expected a receive");
      } else if (wc.byte_len != size) {
        record_error(where + ": byte_len " + std::to_string(wc.byte_len) + ", the sender sent " +
                     std::to_string(size));
      } else if (const auto finding = payload::verify(message); !finding.ok()) {
        record_error(where + ": " + finding.describe());
        // A damaged payload under an intact header still tells where the sequence stands, so
        // one corrupted message is one error, not two.
        if (finding.kind == payload::Finding::Kind::kCorrupt && 2 * finding.mismatched < size &&
            from < qps_.size() && finding.header.sequence == next_sequence[from]) {
          next_sequence[from] = finding.header.sequence + 1;
        }
      } else if (from >= qps_.size() || finding.header.qp != from) {
        record_error(where + ": the message says it was sent on QP " +
                     std::to_string(finding.header.qp));
      } else if (peer_generation[from] >= 0 && finding.header.generation != peer_generation[from]) {
        record_error(where + ": connection generation changed from " +
                     std::to_string(peer_generation[from]) + " to " +
                     std::to_string(finding.header.generation) + " mid-run");
      } else if (finding.header.sequence != next_sequence[from]) {
        record_error(where + ": sequence " + std::to_string(finding.header.sequence) +
                     " arrived where " + std::to_string(next_sequence[from]) +
                     " was due (lost, duplicated or reordered message)");
        next_sequence[from] = finding.header.sequence + 1;
      } else {
        peer_generation[from] = finding.header.generation;
        next_sequence[from] = finding.header.sequence + 1;
        ++validation_.checked;
      }
      post_validated_receive(queue, id.sequence);
    }
    if (clock_check_due(spins) && !draining) {
      if (!counted && guard.peer_finished && guard.peer_finished()) {
        draining = true;
        quiet_since = Clock::now();
        continue;
      }
      check_guard(guard,
                  "validated message " + std::to_string(received + 1) + " from the initiator");
    }
  }
}

// A slot holds whatever message was written to it last. A message is checked once its header and
// trailer agree (in-order placement puts the trailer last) and the header still says the same
// after the copy was taken; a message overwritten before that is counted as skipped, never as
// checked.
void RcSession::serve_write_validation(const RunGuard& guard) {
  const std::size_t size = spec_.message_size;
  const std::size_t slots = receive_slots_;
  std::vector<std::vector<std::uint64_t>> last(qps_.size(),
                                               std::vector<std::uint64_t>(slots, kNone));
  std::vector<std::uint8_t> copy(size);

  // Returns true when it verified a new message.
  auto examine = [&](std::size_t q, std::size_t s, bool tail) {
    const std::uint8_t* at = receive_slot(q, s);
    const std::span<const std::uint8_t> live(at, size);
    hca_barrier();
    const auto header = payload::read_header(live);
    if (header.magic != payload::kMagic || header.sequence == last[q][s]) return false;
    if (payload::read_trailer(live) != header.sequence) {
      // Still landing; after the run every write has completed, so a torn message is damage.
      if (tail) {
        record_error("write slot " + std::to_string(s) + " of QP " + std::to_string(q) +
                     ": header says sequence " + std::to_string(header.sequence) +
                     " but the trailer disagrees after the run");
        last[q][s] = header.sequence;
        ++validation_.messages_received;
      }
      return false;
    }
    std::memcpy(copy.data(), at, size);
    hca_barrier();
    if (payload::read_header(live).sequence != header.sequence) {
      ++validation_.races;
      return false;
    }
    auto finding = payload::verify(copy);
    if (!finding.ok() && !tail) {
      // A fabric free to place a write out of order may not have finished: look once more.
      for (unsigned i = 0; i < kRecheckSpins; ++i) hca_barrier();
      std::memcpy(copy.data(), at, size);
      hca_barrier();
      if (payload::read_header(live).sequence != header.sequence) {
        ++validation_.races;
        return false;
      }
      const auto again = payload::verify(copy);
      if (again.ok()) ++validation_.rechecks;
      finding = again;
    }
    const std::uint64_t sequence = header.sequence;
    const std::uint64_t first_due = last[q][s] == kNone ? s : last[q][s] + slots;
    last[q][s] = sequence;
    ++validation_.messages_received;
    if (!finding.ok()) {
      record_error("write slot " + std::to_string(s) + " of QP " + std::to_string(q) + ": " +
                   finding.describe());
    } else if (header.qp != q || sequence % slots != s || sequence < first_due) {
      record_error("write slot " + std::to_string(s) + " of QP " + std::to_string(q) +
                   " holds message qp=" + std::to_string(header.qp) +
                   " seq=" + std::to_string(sequence) + ", which belongs elsewhere or went back");
      return true;
    } else {
      ++validation_.checked;
      if (tail) ++validation_.tail_checks;
    }
    if (sequence >= first_due) validation_.skipped_overwritten += (sequence - first_due) / slots;
    return true;
  };

  for (unsigned scans = 1;; ++scans) {
    bool found = false;
    for (std::size_t q = 0; q < qps_.size(); ++q) {
      for (std::size_t s = 0; s < slots; ++s) found = examine(q, s, false) || found;
    }
    if (!found || scans % kScansPerPeerCheck == 0) {
      if (guard.peer_finished && guard.peer_finished()) break;
      check_guard(guard, "the end of a validating write run");
    }
    // Nothing new: let the CPU go to whoever places the data. On a soft-RoCE host that is the
    // kernel's packet processing, which a spinning checker would starve into drops and retries.
    if (!found) std::this_thread::yield();
  }
  // The initiator's writes have all completed: what is in the slots now is final.
  for (std::size_t q = 0; q < qps_.size(); ++q) {
    for (std::size_t s = 0; s < slots; ++s) examine(q, s, true);
  }
  validation_.messages_received += validation_.skipped_overwritten;
}

}  // namespace ibprobe::probes

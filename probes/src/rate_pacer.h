// The software rate limiter of a bandwidth loop: each post list is due one list's share of the
// rate after the one before it was due, and a list posted later than that moves the schedule on,
// keeping at most one list of credit. Lateness of up to one list so costs no rate, but a sender
// held up for longer (a stalled peer, a full send queue, a descheduled thread) does not catch up
// with a burst afterwards: at most one list goes out ahead of the rate, as with perftest, whose
// next burst is due a gap after the previous one went out. The loop keeps polling while it
// waits, so completions and the run's guard are served as in an unpaced run.
#pragma once

#include <algorithm>
#include <cstdint>

#include "ibprobe/probes.h"

namespace ibprobe::probes {

class RatePacer {
 public:
  // bytes_per_second 0: no limit, every list may go at once.
  RatePacer(double bytes_per_second, std::uint64_t message_size)
      : ns_per_message_(
            bytes_per_second > 0 ? static_cast<double>(message_size) * 1e9 / bytes_per_second : 0) {
  }

  // Whether the next list may be posted at `now`; the first may go at once.
  bool may_post(TimestampNs now) const {
    return ns_per_message_ == 0 || !started_ || static_cast<double>(now) >= next_ns_;
  }
  // A list of `messages` was posted at `now`.
  void posted(std::uint64_t messages, TimestampNs now) {
    const double list_ns = static_cast<double>(messages) * ns_per_message_;
    const double posted_ns = static_cast<double>(now);
    next_ns_ = started_ ? std::max(next_ns_, posted_ns - list_ns) + list_ns : posted_ns + list_ns;
    started_ = true;
  }
  bool limited() const { return ns_per_message_ > 0; }

 private:
  double ns_per_message_;
  bool started_ = false;
  double next_ns_ = 0;
};

}  // namespace ibprobe::probes

// The software rate limiter of a bandwidth loop: a post list may go out once the messages posted
// before it fit within the rate since the first post. The loop keeps polling while it waits, so
// completions and the run's guard are served as in an unpaced run.
#pragma once

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

  // Whether the next list may be posted at `now`; the first call starts the clock.
  bool may_post(TimestampNs now) {
    if (ns_per_message_ == 0) return true;
    if (start_ == 0) start_ = now;
    return static_cast<double>(now - start_) >= static_cast<double>(posted_) * ns_per_message_;
  }
  void posted(std::uint64_t messages) { posted_ += messages; }
  bool limited() const { return ns_per_message_ > 0; }

 private:
  double ns_per_message_;
  TimestampNs start_ = 0;
  std::uint64_t posted_ = 0;
};

}  // namespace ibprobe::probes

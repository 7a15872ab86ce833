#include "ibprobe/verbs_probe.h"

namespace ibprobe::probes {

std::optional<ProbeGate::Held> ProbeGate::enter(std::stop_token stop,
                                                std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  if (!freed_.wait_until(lock, stop, deadline, [this] { return !busy_; })) return std::nullopt;
  busy_ = true;
  return std::optional<Held>(std::in_place, *this);
}

bool ProbeGate::try_enter() {
  std::lock_guard lock(mutex_);
  if (busy_) return false;
  busy_ = true;
  return true;
}

void ProbeGate::leave() {
  {
    std::lock_guard lock(mutex_);
    busy_ = false;
  }
  freed_.notify_all();
}

}  // namespace ibprobe::probes

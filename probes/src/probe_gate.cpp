#include <condition_variable>
#include <mutex>

#include "ibprobe/verbs_probe.h"

namespace ibprobe::probes {

struct ProbeGate::State {
  std::mutex mutex;
  std::condition_variable_any freed;
  bool busy = false;
};

bool ProbeGate::Held::step_aside(std::chrono::milliseconds pause, const StopSignal& stop,
                                 std::chrono::steady_clock::time_point deadline) {
  if (!gate_) return false;
  ProbeGate& gate = *std::exchange(gate_, nullptr);
  gate.leave();
  if (stop.wait_for(pause)) return false;
  auto again = gate.enter(stop.token(), deadline);
  if (!again) return false;
  gate_ = std::exchange(again->gate_, nullptr);
  return true;
}

ProbeGate::ProbeGate() : state_(std::make_unique<State>()) {}
ProbeGate::~ProbeGate() = default;

std::optional<ProbeGate::Held> ProbeGate::enter(std::stop_token stop,
                                                std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(state_->mutex);
  if (!state_->freed.wait_until(lock, stop, deadline, [this] { return !state_->busy; })) {
    return std::nullopt;
  }
  state_->busy = true;
  return std::optional<Held>(std::in_place, *this);
}

bool ProbeGate::try_enter() {
  std::lock_guard lock(state_->mutex);
  if (state_->busy) return false;
  state_->busy = true;
  return true;
}

void ProbeGate::leave() {
  {
    std::lock_guard lock(state_->mutex);
    state_->busy = false;
  }
  state_->freed.notify_all();
}

}  // namespace ibprobe::probes

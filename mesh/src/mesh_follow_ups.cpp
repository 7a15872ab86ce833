#include "mesh_follow_ups.h"

#include <algorithm>

#include "ibprobe/ud_pinger_clock.h"

namespace ibprobe::mesh {
namespace {

double seconds(std::chrono::nanoseconds duration) {
  return std::chrono::duration<double>(duration).count();
}

MeshFollowUps::Answered on_host_clock(const MeshFollowUps::Pong& pong) {
  return {pong.target, {true, seconds(pong.software_rtt), MeshClock::kSoftware}};
}

// Device clock at both ends, unless the turnaround exceeds the round trip: then the two RNICs'
// figures do not fit together, and the host clock's result stands.
MeshFollowUps::Answered paired(const MeshFollowUps::Pong& pong,
                               std::chrono::nanoseconds turnaround) {
  const auto rtt = probes::network_rtt(*pong.device_round_trip, turnaround);
  if (!rtt) return on_host_clock(pong);
  return {pong.target, {true, seconds(*rtt), MeshClock::kDevice}};
}

}  // namespace

std::optional<MeshFollowUps::Answered> MeshFollowUps::on_pong(std::uint64_t token, Pong pong,
                                                              Clock::time_point now) {
  if (!pong.device_round_trip) return on_host_clock(pong);
  const auto it = waiting_.find(token);
  if (it != waiting_.end() && it->second.turnaround) {
    const auto turnaround = *it->second.turnaround;
    waiting_.erase(it);
    return paired(pong, turnaround);
  }
  waiting_[token] = Waiting{now + wait_, std::move(pong), std::nullopt};
  return std::nullopt;
}

std::optional<MeshFollowUps::Answered> MeshFollowUps::on_follow_up(
    std::uint64_t token, std::chrono::nanoseconds turnaround, Clock::time_point now) {
  const auto it = waiting_.find(token);
  if (it != waiting_.end() && it->second.pong) {
    auto answered = paired(*it->second.pong, turnaround);
    waiting_.erase(it);
    return answered;
  }
  waiting_[token] = Waiting{now + wait_, std::nullopt, turnaround};
  return std::nullopt;
}

std::vector<MeshFollowUps::Answered> MeshFollowUps::expire(Clock::time_point now) {
  std::vector<Answered> answered;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (it->second.deadline > now) {
      ++it;
      continue;
    }
    if (it->second.pong) answered.push_back(on_host_clock(*it->second.pong));
    it = waiting_.erase(it);
  }
  return answered;
}

bool MeshFollowUps::waiting(std::uint64_t token) const {
  return waiting_.contains(token);
}

std::optional<MeshFollowUps::Clock::time_point> MeshFollowUps::next_deadline() const {
  if (waiting_.empty()) return std::nullopt;
  return std::min_element(
             waiting_.begin(), waiting_.end(),
             [](const auto& a, const auto& b) { return a.second.deadline < b.second.deadline; })
      ->second.deadline;
}

}  // namespace ibprobe::mesh

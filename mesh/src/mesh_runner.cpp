#include "ibprobe/mesh_runner.h"

#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>

#include "ibprobe/host_port.h"
#include "ibprobe/mesh_peers.h"
#include "ibprobe/unique_fd.h"
#include "mesh_follow_ups.h"
#include "mesh_metrics.h"

namespace ibprobe::mesh {
namespace {

using Clock = std::chrono::steady_clock;

// A ping unanswered after this long is lost. Far above any RDMA round trip, even rxe's under
// load, and short enough that a cut shows within seconds.
constexpr auto kPingTimeout = std::chrono::seconds(1);
// How long an answered ping waits for the follow-up its responder promised. The responder posts
// it as soon as it sees the pong's send completion, one completion event after answering, so it
// trails the pong by about as long as the responder took to answer; past this the ping is
// timed on the host clock instead, and a lost follow-up costs no more than this delay.
constexpr auto kFollowUpWait = std::chrono::milliseconds(200);
// The plan is recomputed and the peer list reread this often; the plan itself changes only at
// epoch boundaries, so this bounds how late a new epoch or a new peer takes effect.
constexpr auto kReplanInterval = std::chrono::seconds(10);
// Unanswered pings in a row after which the peer's address is asked for again: its exporter may
// have restarted with a new QP.
constexpr int kLossesBeforeRefresh = 3;
constexpr auto kMinRefreshInterval = std::chrono::seconds(10);
constexpr auto kAddressDeadline = std::chrono::seconds(3);

// Targets were checked when the peer list was read.
std::string host_of(const std::string& target) {
  const auto address = probes::parse_host_port(target);
  return address ? address->host : target;
}

// The fabric is rediscovered at most this often for the peer list (as /fabric's default
// discovery interval): a discovery costs SMPs to every node, a reread of a file nothing.
constexpr auto kFabricPeersInterval = std::chrono::minutes(5);

struct PlannedPeer {
  std::string target;
  double rate_hz = 0;
  bool operator==(const PlannedPeer&) const = default;
};

}  // namespace

struct MeshRunner::State {
  Options options;
  std::vector<MeshPeer> fabric_peers;  // the last discovery's, for peers_fabric
  std::optional<Clock::time_point> fabric_discovered_at;
  std::unique_ptr<probes::UdPinger> pinger;
  std::unique_ptr<MeshMetrics> metrics;
  UniqueFd wake_fd;  // eventfd: the ping thread's poll() returns when the plan or endpoints change

  std::mutex mutex;
  std::condition_variable control_wakeup;
  std::atomic<bool> stopping = false;
  std::vector<PlannedPeer> plan;
  std::vector<MeshPeer> peers;  // the list the plan in force was made from
  std::map<std::string, probes::MeshEndpoint> endpoints;
  std::set<std::string> wanted;  // peers whose address the ping thread asks for
  std::atomic<std::uint64_t> generation = 0;
  std::thread control_thread;
  std::thread ping_thread;

  std::expected<std::vector<MeshPeer>, Error> load_peers() {
    const auto& mesh = options.mesh;
    const bool fabric_fresh =
        fabric_discovered_at && Clock::now() - *fabric_discovered_at < kFabricPeersInterval;
    // The constructor has checked that exactly one source is named.
    if (mesh.peers_fabric && fabric_fresh) return fabric_peers;
    auto peers = read_mesh_peers(mesh);
    if (peers && mesh.peers_fabric) {
      fabric_peers = *peers;
      fabric_discovered_at = Clock::now();
    }
    return peers;
  }

  void wake_pinger() const {
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = ::write(wake_fd.get(), &one, sizeof(one));
  }

  void publish(std::vector<PlannedPeer> next_plan) {
    {
      const std::lock_guard lock(mutex);
      if (next_plan == plan) return;
      plan = std::move(next_plan);
    }
    ++generation;
    wake_pinger();
  }

  void replan() {
    try {
      auto peers = load_peers();
      if (!peers) return keep_plan(peers.error().message);
      {
        const std::lock_guard lock(mutex);
        this->peers = *peers;
      }
      const MeshFabric fabric(*std::move(peers));
      const auto self = fabric.find(options.mesh.self);
      if (!self) {
        spdlog::warn("mesh: {} is no longer in the peer list; pinging nobody", options.mesh.self);
        metrics->set_plan(fabric, {});
        publish({});
        return;
      }
      const auto pings =
          plan_mesh(fabric, *self, std::chrono::system_clock::now(), options.mesh.policy);
      metrics->set_plan(fabric, pings);
      std::vector<PlannedPeer> next;
      for (const auto& ping : pings)
        next.push_back({fabric.peers()[ping.peer].target, ping.rate_hz});
      publish(std::move(next));
    } catch (const std::exception& e) {
      keep_plan(e.what());
    }
  }

  // The plan in force stays: a peer list being rewritten is no reason to stop pinging.
  static void keep_plan(const std::string& why) {
    spdlog::warn("mesh: peer list: {}; the current plan stays", why);
  }

  // Peers of the plan without an address, and those the ping thread asked for again.
  std::vector<std::string> lookups_due() {
    const std::lock_guard lock(mutex);
    std::vector<std::string> due(wanted.begin(), wanted.end());
    for (const auto& peer : plan) {
      if (!endpoints.contains(peer.target) && !wanted.contains(peer.target)) {
        due.push_back(peer.target);
      }
    }
    wanted.clear();
    return due;
  }

  void learn(const std::string& target) {
    const auto fetched =
        probes::fetch_mesh_endpoint(host_of(target), options.responder_port, options.shared_secret,
                                    Clock::now() + kAddressDeadline);
    if (!fetched) {
      spdlog::debug("mesh: address of {}: {}", target, fetched.error().message);
      return;
    }
    const auto& endpoint = *fetched;
    const auto& own = pinger->endpoint();
    if (endpoint.gid_family != own.gid_family) {
      spdlog::warn("mesh: {} pings over {} GIDs, this host over {}: not paired", target,
                   endpoint.gid_family, own.gid_family);
      return;
    }
    if (endpoint.gid == own.gid) {
      spdlog::warn("mesh: {} answers with this host's own GID: not pinging itself", target);
      return;
    }
    {
      const std::lock_guard lock(mutex);
      const auto it = endpoints.find(target);
      if (it != endpoints.end() && it->second == endpoint) return;
      endpoints[target] = endpoint;
    }
    spdlog::info("mesh: {} answers pings on QPN {}", target, endpoint.qpn);
    ++generation;
    wake_pinger();
  }

  void control_loop() {
    auto next_plan = Clock::now();
    std::unique_lock lock(mutex);
    while (!stopping) {
      lock.unlock();
      if (Clock::now() >= next_plan) {
        replan();
        next_plan = Clock::now() + kReplanInterval;
      }
      for (const auto& target : lookups_due()) {
        if (stopping) break;
        learn(target);
      }
      lock.lock();
      control_wakeup.wait_until(lock, next_plan, [this] { return stopping || !wanted.empty(); });
    }
  }

  struct Peer {
    double rate_hz = 0;
    std::optional<probes::MeshEndpoint> endpoint;
    Clock::time_point next_due;
    int losses_in_a_row = 0;
    Clock::time_point last_refresh;
  };
  struct InFlight {
    std::string target;
    Clock::time_point sent_at;
  };

  void ping_loop() {
    std::map<std::string, Peer> peers;
    std::map<std::uint64_t, InFlight> in_flight;  // by token, so in sending order
    MeshFollowUps follow_ups(kFollowUpWait);
    std::uint64_t seen_generation = ~0ULL;
    std::uint64_t next_token = 1;

    auto lost = [&](const std::string& target) {
      metrics->record(target, {});
      const auto it = peers.find(target);
      if (it == peers.end() || ++it->second.losses_in_a_row < kLossesBeforeRefresh) return;
      if (Clock::now() - it->second.last_refresh < kMinRefreshInterval) return;
      it->second.last_refresh = Clock::now();
      const std::lock_guard lock(mutex);
      wanted.insert(target);
      control_wakeup.notify_one();
    };

    while (true) {
      if (const auto now_generation = generation.load(); now_generation != seen_generation) {
        seen_generation = now_generation;
        const std::lock_guard lock(mutex);
        if (stopping) return;
        std::map<std::string, Peer> next;
        for (const auto& planned : plan) {
          auto node = peers.extract(planned.target);
          Peer peer = node.empty() ? Peer{} : std::move(node.mapped());
          if (node.empty()) {
            // Spread the first pings over one period, so a plan starts without a burst.
            const auto period = std::chrono::duration<double>(1.0 / planned.rate_hz);
            peer.next_due =
                Clock::now() +
                std::chrono::duration_cast<Clock::duration>(
                    period * (std::hash<std::string>{}(planned.target) % 1000) / 1000.0);
          }
          peer.rate_hz = planned.rate_hz;
          const auto it = endpoints.find(planned.target);
          if (it != endpoints.end()) peer.endpoint = it->second;
          next.emplace(planned.target, std::move(peer));
        }
        peers = std::move(next);
      }

      const auto now = Clock::now();
      auto wake_at = now + std::chrono::seconds(1);
      for (auto& [target, peer] : peers) {
        if (!peer.endpoint) continue;
        if (now >= peer.next_due) {
          const auto token = next_token++;
          // Timed from before the post: rxe sends inside ibv_post_send, and a post the host
          // held up can last the whole round trip, which timing from after it would leave out
          // (RTTs under 5 us were seen).
          const auto sent_at = Clock::now();
          if (pinger->send_ping(*peer.endpoint, token)) {
            in_flight.emplace(token, InFlight{target, sent_at});
          } else {
            lost(target);
          }
          const auto period = std::chrono::duration_cast<Clock::duration>(
              std::chrono::duration<double>(1.0 / peer.rate_hz));
          peer.next_due += period;
          // A host that fell behind (suspended, overloaded) resumes the rate, not a burst.
          if (peer.next_due < now) peer.next_due = now + period;
        }
        wake_at = std::min(wake_at, peer.next_due);
      }
      if (!in_flight.empty())
        wake_at = std::min(wake_at, in_flight.begin()->second.sent_at + kPingTimeout);
      if (const auto deadline = follow_ups.next_deadline()) wake_at = std::min(wake_at, *deadline);

      const auto timeout = std::chrono::ceil<std::chrono::milliseconds>(wake_at - Clock::now());
      auto events = pinger->wait(std::max(timeout, std::chrono::milliseconds(0)), wake_fd.get());
      std::uint64_t drained = 0;
      [[maybe_unused]] const auto n = ::read(wake_fd.get(), &drained, sizeof(drained));

      const auto received = Clock::now();
      for (const auto& pong : events.pongs) {
        const auto it = in_flight.find(pong.token);
        if (it == in_flight.end()) continue;  // late: already counted lost
        const auto round_trip = pong.received_at - it->second.sent_at;
        const auto rtt =
            round_trip - std::min<Clock::duration>(pong.responder_turnaround, round_trip);
        if (const auto peer = peers.find(it->second.target); peer != peers.end()) {
          peer->second.losses_in_a_row = 0;
        }
        MeshFollowUps::Pong answered{it->second.target, rtt,
                                     pong.follow_up_coming ? pong.device_round_trip : std::nullopt};
        in_flight.erase(it);
        if (auto result = follow_ups.on_pong(pong.token, std::move(answered), received)) {
          metrics->record(result->target, result->result);
        }
      }
      for (const auto& follow_up : events.follow_ups) {
        if (!in_flight.contains(follow_up.token) && !follow_ups.waiting(follow_up.token)) continue;
        if (auto result =
                follow_ups.on_follow_up(follow_up.token, follow_up.device_turnaround, received)) {
          metrics->record(result->target, result->result);
        }
      }
      for (const auto& result : follow_ups.expire(Clock::now())) {
        metrics->record(result.target, result.result);
      }
      for (const auto token : events.failed_sends) {
        const auto it = in_flight.find(token);
        if (it == in_flight.end()) continue;
        const auto target = it->second.target;
        in_flight.erase(it);
        lost(target);
      }
      const auto expired_before = Clock::now() - kPingTimeout;
      while (!in_flight.empty() && in_flight.begin()->second.sent_at <= expired_before) {
        const auto target = in_flight.begin()->second.target;
        in_flight.erase(in_flight.begin());
        lost(target);
      }
    }
  }
};

MeshRunner::MeshRunner(Options options) : state_(std::make_unique<State>()) {
  auto& s = *state_;
  s.options = std::move(options);
  const auto& mesh = s.options.mesh;
  if ((mesh.peers_file.empty() ? 0 : 1) + (mesh.peers_dns.empty() ? 0 : 1) +
          (mesh.peers_fabric ? 1 : 0) !=
      1) {
    throw std::invalid_argument("mesh: give one of peers_file, peers_dns and peers_fabric");
  }
  if (mesh.self.empty()) throw std::invalid_argument("mesh: self is not set");
  auto peers = s.load_peers();
  if (!peers) throw std::runtime_error("mesh: " + peers.error().message);
  s.peers = *peers;
  const MeshFabric fabric(*std::move(peers));
  const auto self = fabric.find(mesh.self);
  if (!self) throw std::invalid_argument("mesh: self " + mesh.self + " is not in the peer list");
  s.pinger = std::make_unique<probes::UdPinger>(s.options.local);
  s.metrics = std::make_unique<MeshMetrics>(
      fabric.peers()[*self].tor, mesh.policy.host_budget_hz,
      s.pinger->clock() == probes::PingClock::kDevice ? MeshClock::kDevice : MeshClock::kSoftware,
      mesh.per_peer_rtt);
  s.wake_fd.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!s.wake_fd) throw std::runtime_error("mesh: eventfd: " + std::string(std::strerror(errno)));
  spdlog::info("mesh: {} on {} port {}, QPN {}, {} GIDs; RTT clock: {}", mesh.self,
               s.options.local.device, s.options.local.port, s.pinger->endpoint().qpn,
               s.pinger->endpoint().gid_family, s.pinger->clock_detail());
  s.control_thread = std::thread([&s] { s.control_loop(); });
  s.ping_thread = std::thread([&s] {
    // A device that fails under the pinger (removed, reset) ends the mesh, not the exporter:
    // /metrics keeps serving, the counters stop and the mesh rules see the host go quiet.
    try {
      s.ping_loop();
    } catch (const std::exception& e) {
      spdlog::error("mesh: pinging stopped: {}", e.what());
    }
  });
}

MeshRunner::~MeshRunner() {
  auto& s = *state_;
  {
    const std::lock_guard lock(s.mutex);
    s.stopping = true;
  }
  s.control_wakeup.notify_one();
  ++s.generation;
  s.wake_pinger();
  s.ping_thread.join();
  s.control_thread.join();
}

const probes::MeshEndpoint& MeshRunner::endpoint() const {
  return state_->pinger->endpoint();
}

std::vector<MeshPeer> MeshRunner::peers() const {
  const std::lock_guard lock(state_->mutex);
  return state_->peers;
}

const std::string& MeshRunner::self() const {
  return state_->options.mesh.self;
}

collectors::MetricSet MeshRunner::metrics() const {
  return state_->metrics->collect();
}

}  // namespace ibprobe::mesh

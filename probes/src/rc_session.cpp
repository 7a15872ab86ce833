#include "rc_session.h"

#include <numa.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <random>

#include "payload.h"

namespace ibprobe::probes {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kPollBatch = 16;
// Spinning loops look at the clock only every so many turns: reading it costs more than a poll.
constexpr unsigned kSpinsPerClockCheck = 1024;
// A ping-pong's waits make no system call while answers come on time: the guard's checks (the
// peer's control socket, the deadline) run between iterations every kIterationsPerGuardCheck,
// and inside a wait only once its answer is late, when that sample is an outlier anyway.
constexpr std::uint64_t kIterationsPerGuardCheck = 1000;
constexpr TimestampNs kLateAnswerNs = 10'000'000;

bool late(TimestampNs since) {
  return steady_now_ns() - since > kLateAnswerNs;
}

std::uint32_t random_psn() {
  static thread_local std::mt19937 generator{std::random_device{}()};
  return generator() & 0xffffff;
}

void modify(ibv_qp* qp, ibv_qp_attr& attr, int mask, const char* step) {
  if (const int rc = ibv_modify_qp(qp, &attr, mask); rc != 0) {
    throw verbs::VerbsError(std::string("ibv_modify_qp to ") + step, rc);
  }
}

// A wait that gave up also tells whether this side's own port is still up: a port gone down
// explains the silence here, an ACTIVE one points at the path or the peer.
void check(const RunGuard& guard, const std::string& waiting_for, ibv_context* context,
           std::uint8_t port) {
  if (guard.check_peer) guard.check_peer();
  if (Clock::now() <= guard.deadline) return;
  std::string local = std::string("local port ") + ibv_get_device_name(context->device) + "/" +
                      std::to_string(port);
  ibv_port_attr attr{};
  if (ibv_query_port(context, port, &attr) == 0) {
    local += std::string(" is ") + ibv_port_state_str(attr.state);
  }
  const std::string bound =
      guard.timeout.count() > 0
          ? "the run's deadline (timeout " + std::to_string(guard.timeout.count()) + " s) passed"
          : "the run's deadline passed";
  throw ProbeFailure("timed out: " + bound + " waiting for " + waiting_for + "; " + local,
                     FailureKind::kTimeout);
}

std::string seconds_since(TimestampNs since) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", static_cast<double>(steady_now_ns() - since) / 1e9);
  return text;
}

// Whether a run that hit its deadline was still moving or had stalled: a slow link that needs
// more time and a lost message are different findings.
std::string progress_since(TimestampNs last_progress) {
  constexpr double kStalledAfterSeconds = 1.0;
  const double idle = static_cast<double>(steady_now_ns() - last_progress) / 1e9;
  return idle < kStalledAfterSeconds
             ? "still progressing: last completion " + seconds_since(last_progress) + " ago"
             : "stalled: no completion for " + seconds_since(last_progress);
}

}  // namespace

NumaBinding::NumaBinding(int node) : node_(node) {
  if (node_ < 0) return;
  if (numa_run_on_node(node_) != 0) {
    throw verbs::VerbsError("binding the probe thread to NUMA node " + std::to_string(node_),
                            errno);
  }
  numa_set_preferred(node_);
}

NumaBinding::~NumaBinding() {
  if (node_ < 0) return;
  numa_run_on_node(-1);
  numa_set_localalloc();
}

int numa_node_for(const std::string& device, NumaPolicy policy,
                  std::optional<std::uint32_t> node_asked) {
  if (policy == NumaPolicy::kNone || numa_available() < 0) return -1;
  if (policy == NumaPolicy::kNode) {
    const int node = static_cast<int>(node_asked.value_or(0));
    if (node > numa_max_node()) {
      throw ProbeFailure("NUMA node " + std::to_string(node) +
                             " does not exist on this host (nodes 0-" +
                             std::to_string(numa_max_node()) + ")",
                         FailureKind::kRejected);
    }
    return node;
  }
  std::ifstream file("/sys/class/infiniband/" + device + "/device/numa_node");
  int node = -1;
  if (!(file >> node) || node > numa_max_node()) return -1;
  return node;
}

RcSession::RcSession(const LocalPort& local, const ProbeSpec& spec, Side side)
    : spec_(spec),
      numa_(side == Side::kInitiator
                ? numa_node_for(local.device, spec.numa, spec.numa_node)
                : numa_node_for(local.device, spec.peer_numa, spec.peer_numa_node)),
      port_number_(local.port),
      context_(verbs::open_device(local.device)),
      port_(verbs::query_port(
          context_.get(), local.port,
          static_cast<int>(
              (side == Side::kInitiator ? spec.gid_index : spec.peer_gid_index).value_or(-1)))),
      cq_moderation_(effective_cq_moderation(spec)),
      chain_(std::max(spec.post_list, 1u)),
      chain_sges_(chain_.size()) {
  if (port_.attr.state != IBV_PORT_ACTIVE) {
    throw ProbeFailure(local.device + " port " + std::to_string(local.port) +
                           " is not ACTIVE (state " + ibv_port_state_str(port_.attr.state) + ")",
                       FailureKind::kVerbs);
  }
  ibv_device_attr device_attr{};
  if (const int rc = ibv_query_device(context_.get(), &device_attr); rc != 0) {
    throw verbs::VerbsError("ibv_query_device", rc);
  }
  // perftest's out_reads: the device's own limit, then the lower of it and the peer's.
  max_rd_atomic_ = static_cast<std::uint32_t>(std::clamp(device_attr.max_qp_rd_atom, 1, 255));
  outstanding_reads_ =
      static_cast<std::uint32_t>(std::clamp(device_attr.max_qp_init_rd_atom, 1, 255));
  inline_size_ = spec.inline_size.value_or(perftest_default_inline(
      device_attr.vendor_id, device_attr.vendor_part_id, spec.operation, spec.test));

  pd_.reset(ibv_alloc_pd(context_.get()));
  if (!pd_) throw verbs::VerbsError("ibv_alloc_pd", errno);
  const bool send = spec.operation == Operation::kSend;
  if (spec.validation) {
    send_slots_ = spec.tx_depth;
    receive_slots_ = send ? (spec.posted_receives ? spec.posted_receives : spec.rx_depth)
                          : std::max(spec.tx_depth, spec.rx_depth);
  }
  generation_ = payload::next_generation();
  buffer_ = verbs::register_buffer(pd_.get(),
                                   spec.qps * (receive_slots_ + send_slots_) * spec.message_size);
  const int cq_entries = static_cast<int>(spec.qps * (spec.tx_depth + (send ? spec.rx_depth : 0)));
  cq_.reset(ibv_create_cq(context_.get(), cq_entries, nullptr, nullptr, 0));
  if (!cq_) throw verbs::VerbsError("ibv_create_cq(" + std::to_string(cq_entries) + ")", errno);
  if (spec.use_srq) {
    ibv_srq_init_attr srq_attr{};
    srq_attr.attr.max_wr = spec.rx_depth;
    srq_attr.attr.max_sge = spec.receive_sges;
    srq_.reset(ibv_create_srq(pd_.get(), &srq_attr));
    if (!srq_) throw verbs::VerbsError("ibv_create_srq", errno);
  }

  for (std::uint32_t q = 0; q < spec.qps; ++q) {
    ibv_qp_init_attr init{};
    init.send_cq = cq_.get();
    init.recv_cq = cq_.get();
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = spec.tx_depth;
    init.srq = srq_.get();
    init.cap.max_recv_wr = send && !srq_ ? spec.rx_depth : 1;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = spec.receive_sges;
    init.cap.max_inline_data = inline_size_;
    verbs::QueuePair qp(ibv_create_qp(pd_.get(), &init));
    if (!qp) throw verbs::VerbsError("ibv_create_qp", errno);

    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = 0;
    attr.port_num = port_number_;
    attr.qp_access_flags =
        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    modify(qp.get(), attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
           "INIT");
    qps_.push_back(std::move(qp));
    psns_.push_back(random_psn());
  }
}

std::uint8_t* RcSession::receive_area(std::size_t qp) const {
  return buffer_.memory.get() + qp * (receive_slots_ + send_slots_) * spec_.message_size;
}

std::uint8_t* RcSession::send_area(std::size_t qp) const {
  return receive_area(qp) + receive_slots_ * spec_.message_size;
}

std::vector<protocol::PreflightCheck> RcSession::preflight_checks() const {
  constexpr int kLinkUp = 5;
  const auto& a = port_.attr;
  std::vector<protocol::PreflightCheck> checks;
  checks.push_back({"port_active", a.state == IBV_PORT_ACTIVE && a.phys_state == kLinkUp,
                    std::string("state ") + ibv_port_state_str(a.state) + ", physical state " +
                        std::to_string(a.phys_state)});
  if (!port_.is_ethernet) {
    checks.push_back({"sm_lid", a.sm_lid != 0 && a.lid != 0,
                      "lid " + std::to_string(a.lid) + ", sm_lid " + std::to_string(a.sm_lid)});
  }
  char rate[32];
  std::snprintf(rate, sizeof(rate), "%g", verbs::port_rate_gbps(a));
  checks.push_back({"link_rate", verbs::port_rate_gbps(a) > 0, rate});
  return checks;
}

protocol::QpInfo RcSession::local_endpoints() const {
  protocol::QpInfo info;
  const std::uint32_t port_mtu = verbs::mtu_bytes(port_.attr.active_mtu);
  for (std::size_t q = 0; q < qps_.size(); ++q) {
    protocol::QpEndpoint endpoint;
    endpoint.qpn = qps_[q]->qp_num;
    endpoint.psn = psns_[q];
    endpoint.lid = port_.attr.lid;
    endpoint.gid = port_.gid;
    endpoint.rkey = buffer_.mr->rkey;
    endpoint.addr = reinterpret_cast<std::uintptr_t>(receive_area(q));
    endpoint.mtu = spec_.mtu ? std::min(*spec_.mtu, port_mtu) : port_mtu;
    endpoint.max_rd_atomic = max_rd_atomic_;
    info.qps.push_back(endpoint);
  }
  return info;
}

void RcSession::connect(const protocol::QpInfo& remote) {
  if (remote.qps.size() != qps_.size()) {
    throw ProbeFailure("peer offered " + std::to_string(remote.qps.size()) + " QPs, expected " +
                           std::to_string(qps_.size()),
                       FailureKind::kProtocol);
  }
  const auto local = local_endpoints();
  // Reads in flight: no more than the peer's QP accepts (all its QPs have the same limit).
  outstanding_reads_ = std::min(outstanding_reads_, remote.qps.front().max_rd_atomic);
  for (std::size_t q = 0; q < qps_.size(); ++q) {
    const auto& peer = remote.qps[q];
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = verbs::mtu_enum(std::min(peer.mtu, local.qps[q].mtu));
    attr.dest_qp_num = peer.qpn;
    attr.rq_psn = peer.psn;
    attr.max_dest_rd_atomic = static_cast<std::uint8_t>(max_rd_atomic_);
    attr.min_rnr_timer = static_cast<std::uint8_t>(spec_.rc.min_rnr_timer);
    attr.ah_attr.dlid = peer.lid;
    attr.ah_attr.port_num = port_number_;
    // RoCE always routes by GID; InfiniBand needs the GRH only across subnets.
    if (port_.is_ethernet) {
      attr.ah_attr.is_global = 1;
      std::memcpy(attr.ah_attr.grh.dgid.raw, peer.gid.data(), peer.gid.size());
      attr.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(port_.gid_index);
      attr.ah_attr.grh.hop_limit = 64;
    }
    modify(qps_[q].get(), attr,
           IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
               IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
           "RTR");

    attr = {};
    attr.qp_state = IBV_QPS_RTS;
    attr.timeout = static_cast<std::uint8_t>(spec_.rc.timeout);
    attr.retry_cnt = static_cast<std::uint8_t>(spec_.rc.retry_cnt);
    attr.rnr_retry = static_cast<std::uint8_t>(spec_.rc.rnr_retry);
    attr.sq_psn = psns_[q];
    attr.max_rd_atomic = static_cast<std::uint8_t>(outstanding_reads_);
    modify(qps_[q].get(), attr,
           IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
               IBV_QP_MAX_QP_RD_ATOMIC,
           "RTS");
    peers_.push_back(Peer{peer.addr, peer.rkey});
  }
  // Receives must be in place before the peer is told we are ready, or its first sends meet
  // RNR NAKs.
  if (spec_.operation == Operation::kSend) {
    const std::size_t queues = srq_ ? 1 : qps_.size();
    const std::uint32_t posted = spec_.posted_receives ? spec_.posted_receives : spec_.rx_depth;
    for (std::size_t q = 0; q < queues; ++q) {
      for (std::uint32_t i = 0; i < posted; ++i) {
        if (spec_.validation) {
          post_validated_receive(q, i);
        } else {
          post_receive(q);
        }
      }
    }
  }
}

ibv_sge RcSession::message_at(std::uint8_t* area) const {
  ibv_sge sge{};
  sge.addr = reinterpret_cast<std::uintptr_t>(area);
  sge.length = static_cast<std::uint32_t>(spec_.message_size);
  sge.lkey = buffer_.mr->lkey;
  return sge;
}

void RcSession::post_receive(std::size_t qp) {
  ibv_sge sge = message_at(receive_area(qp));
  ibv_recv_wr wr{};
  wr.wr_id = qp;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  const int rc =
      srq_ ? ibv_post_srq_recv(srq_.get(), &wr, &bad) : ibv_post_recv(qps_[qp].get(), &wr, &bad);
  if (rc != 0) throw verbs::VerbsError("ibv_post_recv", rc);
}

void RcSession::post(std::size_t qp, std::uint32_t count, std::uint64_t posted_before,
                     std::uint64_t last) {
  const bool read = spec_.operation == Operation::kRead;
  const bool send = spec_.operation == Operation::kSend;
  const bool inline_data = !read && spec_.message_size <= inline_size_;
  for (std::uint32_t i = 0; i < count; ++i) {
    // A read lands in our receive area; a write or send leaves from the send area.
    ibv_sge& sge = chain_sges_[i];
    sge = message_at(read ? receive_area(qp) : send_area(qp));
    ibv_send_wr& wr = chain_[i];
    wr = {};
    wr.wr_id = qp;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = read ? IBV_WR_RDMA_READ : send ? IBV_WR_SEND : IBV_WR_RDMA_WRITE;
    const std::uint64_t number = posted_before + i + 1;
    const bool signaled = number % cq_moderation_ == 0 || number == last;
    wr.send_flags = 0;
    if (signaled) wr.send_flags |= IBV_SEND_SIGNALED;
    if (inline_data) wr.send_flags |= IBV_SEND_INLINE;
    if (!send) {
      wr.wr.rdma.remote_addr = peers_[qp].addr;
      wr.wr.rdma.rkey = peers_[qp].rkey;
    }
    wr.next = i + 1 < count ? &chain_[i + 1] : nullptr;
  }
  ++post_calls_;
  ibv_send_wr* bad = nullptr;
  if (const int rc = ibv_post_send(qps_[qp].get(), chain_.data(), &bad); rc != 0) {
    throw verbs::VerbsError("ibv_post_send", rc);
  }
}

protocol::SideFacts RcSession::facts() const {
  protocol::SideFacts facts;
  facts.gid_index = static_cast<std::uint32_t>(port_.gid_index);
  if (numa_.node() >= 0) facts.numa_node = static_cast<std::uint32_t>(numa_.node());
  facts.inline_size = inline_size_;
  facts.relaxed_ordering = buffer_.relaxed_ordering;
  return facts;
}

int RcSession::poll(ibv_wc* wcs, int max) {
  const int n = ibv_poll_cq(cq_.get(), max, wcs);
  if (n < 0) throw ProbeFailure("ibv_poll_cq failed", FailureKind::kVerbs);
  completions_ += static_cast<std::uint64_t>(n);
  for (int i = 0; i < n; ++i) {
    if (wcs[i].status != IBV_WC_SUCCESS) {
      throw ProbeFailure(describe_failed_completion(wcs[i], spec_), FailureKind::kVerbs);
    }
  }
  return n;
}

// perftest's run_iter_bw: keep up to tx_depth messages in flight per QP, posted post_list at a
// time with one call, ask for a completion every cq_moderation messages (and for the last),
// timestamp every list head and every reaped completion batch.
BandwidthStats RcSession::run_bandwidth(const RunGuard& guard) {
  if (spec_.validation) return run_bandwidth_validated(guard);
  return spec_.iterations ? run_bandwidth_iterations(guard) : run_bandwidth_duration(guard);
}

BandwidthStats RcSession::run_bandwidth_iterations(const RunGuard& guard) {
  const std::uint64_t per_qp = *spec_.iterations;
  const std::uint64_t total = per_qp * qps_.size();
  std::vector<TimestampNs> posted(total), completed(total);
  std::vector<std::uint64_t> sent(qps_.size()), done(qps_.size());
  std::uint64_t total_sent = 0, total_done = 0;
  TimestampNs last_progress = steady_now_ns();
  unsigned spins = 0;
  ibv_wc wcs[kPollBatch];
  while (total_done < total) {
    for (std::size_t q = 0; q < qps_.size(); ++q) {
      // validate() makes the iterations a multiple of the post list: every list is whole.
      while (sent[q] < per_qp && sent[q] - done[q] + spec_.post_list <= spec_.tx_depth) {
        posted[total_sent] = steady_now_ns();
        post(q, spec_.post_list, sent[q], per_qp);
        sent[q] += spec_.post_list;
        total_sent += spec_.post_list;
      }
    }
    const int n = poll(wcs, kPollBatch);
    if (n == 0) {
      if (++spins % kSpinsPerClockCheck == 0) {
        check(guard,
              "completions (" + std::to_string(total_done) + " of " + std::to_string(total) +
                  " messages done, " + std::to_string(total_sent - total_done) + " in flight; " +
                  progress_since(last_progress) + ")",
              context_.get(), port_number_);
      }
      continue;
    }
    const TimestampNs now = steady_now_ns();
    last_progress = now;
    for (int i = 0; i < n; ++i) {
      const auto q = static_cast<std::size_t>(wcs[i].wr_id);
      // Each completion closes the batch up to its signaled message: cq_moderation messages,
      // or what is left of the QP's share at the end.
      const std::uint64_t batch = std::min<std::uint64_t>(cq_moderation_, per_qp - done[q]);
      done[q] += batch;
      total_done += batch;
      completed[total_done - 1] = now;
    }
  }
  return bandwidth_stats(posted, completed, spec_);
}

DurationWindow::DurationWindow(const ProbeSpec& spec) {
  const auto start = Clock::now();
  sample_from_ = start + std::chrono::seconds(spec.margin_seconds);
  stop_ = start + std::chrono::seconds(*spec.duration_seconds);
  sample_to_ = stop_ - std::chrono::seconds(spec.margin_seconds);
}

bool DurationWindow::posting(std::uint64_t total_done) {
  const auto now = Clock::now();
  if (!from_ns_ && now >= sample_from_) {
    from_ns_ = steady_now_ns();
    done_at_from_ = total_done;
  }
  if (!to_ns_ && now >= sample_to_) {
    to_ns_ = steady_now_ns();
    done_at_to_ = total_done;
  }
  return now < stop_;
}

BandwidthStats DurationWindow::stats(std::uint64_t message_size) const {
  return bandwidth_stats_duration(from_ns_, to_ns_, done_at_to_ - done_at_from_, message_size);
}

// Duration mode: post for the whole duration, then let the queues drain.
BandwidthStats RcSession::run_bandwidth_duration(const RunGuard& guard) {
  DurationWindow window(spec_);
  struct QpState {
    std::uint64_t in_flight = 0;
    std::uint64_t unsignaled = 0;       // posted since the last signaled message
    std::deque<std::uint64_t> batches;  // messages each outstanding completion stands for
  };
  std::vector<QpState> state(qps_.size());
  std::uint64_t total_done = 0;
  TimestampNs last_progress = steady_now_ns();
  ibv_wc wcs[kPollBatch];
  for (unsigned spins = 1;; ++spins) {
    const bool posting = window.posting(total_done);
    bool outstanding = false;
    for (std::size_t q = 0; q < qps_.size(); ++q) {
      auto& s = state[q];
      // Whole post lists while posting; after the stop, one signaled message closes the
      // unsignaled tail so it completes too.
      while (true) {
        std::uint32_t count = 0;
        std::uint64_t last = 0;
        if (posting && s.in_flight + spec_.post_list <= spec_.tx_depth) {
          count = spec_.post_list;
        } else if (!posting && s.unsignaled > 0 && s.in_flight < spec_.tx_depth) {
          count = 1;
          last = s.unsignaled + 1;
        } else {
          break;
        }
        post(q, count, s.unsignaled, last);
        for (std::uint32_t i = 0; i < count; ++i) {
          ++s.in_flight;
          ++s.unsignaled;
          if (s.unsignaled == cq_moderation_ || s.unsignaled == last) {
            s.batches.push_back(s.unsignaled);
            s.unsignaled = 0;
          }
        }
      }
      outstanding = outstanding || !s.batches.empty() || s.unsignaled > 0;
    }
    if (!posting && !outstanding) break;
    const int n = poll(wcs, kPollBatch);
    if (n > 0) last_progress = steady_now_ns();
    for (int i = 0; i < n; ++i) {
      auto& s = state[static_cast<std::size_t>(wcs[i].wr_id)];
      const std::uint64_t batch = s.batches.front();
      s.batches.pop_front();
      s.in_flight -= batch;
      total_done += batch;
    }
    if (spins % kSpinsPerClockCheck == 0) {
      std::uint64_t in_flight = 0;
      for (const auto& s : state) in_flight += s.in_flight;
      check(guard,
            "completions of the duration run (" + std::to_string(in_flight) +
                " messages in flight; " + progress_since(last_progress) + ")",
            context_.get(), port_number_);
    }
  }
  return window.stats(spec_.message_size);
}

// Ping-pong (perftest's run_iter_lat*): post one message, wait for the answer. For write the
// answer is the peer's write landing in our buffer, for send a receive completion, for read the
// read's own completion. A sample is the time between successive posts.
LatencyStats RcSession::run_latency(const RunGuard& guard) {
  const std::uint64_t iterations = *spec_.iterations;
  std::vector<TimestampNs> post_times(iterations);
  for (std::uint64_t i = 0; i < iterations; ++i) {
    if (i > 0 && i % kIterationsPerGuardCheck == 0) {
      check(guard, "iteration " + std::to_string(i + 1), context_.get(), port_number_);
    }
    post_times[i] = steady_now_ns();
    exchange(i, post_times[i], guard);
  }
  return latency_stats(post_times, spec_.operation);
}

// perftest's duration-mode latency: ping-pong for the whole duration and count the round trips
// between the end of the warm-up margin and the start of the cool-down margin.
DurationLatencyStats RcSession::run_latency_duration(const RunGuard& guard) {
  const auto start = Clock::now();
  const auto sample_from = start + std::chrono::seconds(spec_.margin_seconds);
  const auto stop = start + std::chrono::seconds(*spec_.duration_seconds);
  const auto sample_to = stop - std::chrono::seconds(spec_.margin_seconds);
  TimestampNs from_ns = 0, to_ns = 0;
  std::uint64_t done_at_from = 0, done_at_to = 0;
  for (std::uint64_t i = 0;; ++i) {
    if (i > 0 && i % kIterationsPerGuardCheck == 0) {
      check(guard, "iteration " + std::to_string(i + 1), context_.get(), port_number_);
    }
    const TimestampNs now_ns = steady_now_ns();
    const auto now = Clock::now();
    if (!from_ns && now >= sample_from) {
      from_ns = now_ns;
      done_at_from = i;
    }
    if (!to_ns && now >= sample_to) {
      to_ns = now_ns;
      done_at_to = i;
    }
    if (now >= stop) break;
    exchange(i, now_ns, guard);
  }
  return duration_latency_stats(from_ns, to_ns, done_at_to - done_at_from, spec_.operation);
}

// One round trip of the ping-pong (perftest's run_iter_lat*): post one message, wait for the
// answer. For write the answer is the peer's write landing in our buffer, for send a receive
// completion, for read the read's own completion.
void RcSession::exchange(std::uint64_t i, TimestampNs sent_at, const RunGuard& guard) {
  volatile std::uint8_t* arrival = receive_area(0) + spec_.message_size - 1;
  std::uint8_t* outgoing = send_area(0) + spec_.message_size - 1;
  ibv_wc wcs[kPollBatch];
  const auto mark = static_cast<std::uint8_t>(i + 1);
  *outgoing = mark;
  post(0, 1, 0, 1);
  bool answered = spec_.operation == Operation::kRead, completed = false;
  for (unsigned spins = 1; !(answered && completed); ++spins) {
    const int n = poll(wcs, kPollBatch);
    for (int c = 0; c < n; ++c) {
      if (wcs[c].opcode == IBV_WC_RECV) {
        answered = true;
        post_receive(0);
      } else {
        completed = true;
      }
    }
    if (spec_.operation == Operation::kWrite && !answered && *arrival == mark) answered = true;
    if (spins % kSpinsPerClockCheck == 0 && late(sent_at)) {
      check(guard,
            "the peer's answer to iteration " + std::to_string(i + 1) +
                (spec_.iterations ? " of " + std::to_string(*spec_.iterations) : std::string()) +
                " (sent " + seconds_since(sent_at) + " ago, " +
                (completed ? "acknowledged" : "not acknowledged") + " by the peer's HCA)",
            context_.get(), port_number_);
    }
  }
}

// The answering half of the write and send ping-pong.
void RcSession::serve_latency(const RunGuard& guard) {
  if (spec_.operation == Operation::kRead) return;
  // Iteration mode: the count is known. Duration mode: until the initiator says it is over.
  const bool counted = spec_.iterations.has_value();
  const std::uint64_t iterations = spec_.iterations.value_or(0);
  volatile std::uint8_t* arrival = receive_area(0) + spec_.message_size - 1;
  std::uint8_t* outgoing = send_area(0) + spec_.message_size - 1;
  ibv_wc wcs[kPollBatch];
  // The initiator's next send can arrive before our answer's completion is reported (it only
  // waits for the answer itself), so receives are counted wherever they show up.
  std::uint64_t received = 0;
  auto reap = [&] {
    bool sent = false;
    const int n = poll(wcs, kPollBatch);
    for (int c = 0; c < n; ++c) {
      if (wcs[c].opcode == IBV_WC_RECV) {
        ++received;
        post_receive(0);
      } else {
        sent = true;
      }
    }
    return sent;
  };
  for (std::uint64_t i = 0; !counted || i < iterations; ++i) {
    if (i > 0 && i % kIterationsPerGuardCheck == 0) {
      check(guard, "iteration " + std::to_string(i + 1), context_.get(), port_number_);
    }
    const auto mark = static_cast<std::uint8_t>(i + 1);
    const TimestampNs waiting_since = steady_now_ns();
    for (unsigned spins = 1;; ++spins) {
      if (spec_.operation == Operation::kWrite ? *arrival == mark : (reap(), received > i)) break;
      if (spins % kSpinsPerClockCheck == 0 && late(waiting_since)) {
        if (!counted && guard.peer_finished && guard.peer_finished()) return;
        check(guard,
              "the initiator's message " + std::to_string(i + 1) +
                  (counted ? " of " + std::to_string(iterations) : std::string()),
              context_.get(), port_number_);
      }
    }
    *outgoing = mark;
    post(0, 1, 0, 1);
    const TimestampNs answered_at = steady_now_ns();
    for (unsigned spins = 1; !reap(); ++spins) {
      if (spins % kSpinsPerClockCheck == 0 && late(answered_at)) {
        check(guard, "our answer's completion", context_.get(), port_number_);
      }
    }
  }
}

// Keeps receives posted for the initiator's sends and counts them: every message needs a
// receive, and a missing one is an RNR NAK the sender has to retry.
void RcSession::serve_send_bandwidth(const RunGuard& guard) {
  if (spec_.validation) return serve_send_validated(guard);
  // Iteration mode: the count is known. Duration mode: until the initiator says it is over.
  const bool counted = spec_.iterations.has_value();
  const std::uint64_t expected = counted ? *spec_.iterations * qps_.size() : 0;
  std::uint64_t received = 0;
  ibv_wc wcs[kPollBatch];
  for (unsigned spins = 1; !counted || received < expected; ++spins) {
    const int n = poll(wcs, kPollBatch);
    for (int c = 0; c < n; ++c) {
      ++received;
      post_receive(srq_ ? 0 : static_cast<std::size_t>(wcs[c].wr_id));
    }
    if (spins % kSpinsPerClockCheck == 0) {
      if (!counted && guard.peer_finished && guard.peer_finished()) return;
      check(guard, "message " + std::to_string(received + 1) + " from the initiator",
            context_.get(), port_number_);
    }
  }
}

}  // namespace ibprobe::probes

#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <span>

#include "ibprobe/mesh_pinger.h"
#include "ibprobe/ud_pinger_clock.h"
#include "ud_pinger_wire.h"
#include "verbs.h"

namespace ibprobe::probes {
namespace {

using Clock = std::chrono::steady_clock;
using ud_wire::Kind;

// Every UD receive buffer starts with the 40-byte GRH the HCA writes ahead of the payload.
constexpr std::size_t kGrhBytes = 40;
constexpr std::size_t kRecvSlotBytes = 128;
constexpr std::size_t kSendSlotBytes = 64;
static_assert(ud_wire::kMessageBytes + kGrhBytes <= kRecvSlotBytes &&
              ud_wire::kMessageBytes <= kSendSlotBytes);
// At 100 pings/s out and as many answered, a second of completions fits in either queue.
constexpr std::uint32_t kRecvDepth = 256;
constexpr std::uint32_t kSendDepth = 256;
constexpr std::uint64_t kSendTag = 1ULL << 63;
// Address handles kept for reuse; beyond this the cache starts over (a send holds its own).
constexpr std::size_t kMaxCachedHandles = 1024;
// Send stamps of pings awaiting their pong. At the 100 pings/s budget and a 1 s timeout about
// 100 are in flight; beyond this many, the oldest are long lost.
constexpr std::size_t kMaxPingStamps = 4096;
constexpr std::size_t kUdPollBatch = 32;

// What the extended CQ must report besides the timestamp: the fields ibv_poll_cq fills that the
// receive path and ibv_create_ah_from_wc read.
constexpr std::uint64_t kStampedCqFlags =
    std::uint64_t{IBV_WC_STANDARD_FLAGS} | std::uint64_t{IBV_WC_EX_WITH_COMPLETION_TIMESTAMP};

// A nanosecond count from the wire; a value beyond the signed range (no turnaround is that long)
// saturates instead of turning negative.
std::chrono::nanoseconds wire_ns(std::uint64_t value) {
  constexpr auto kMax =
      static_cast<std::uint64_t>(std::numeric_limits<std::chrono::nanoseconds::rep>::max());
  return std::chrono::nanoseconds(static_cast<std::int64_t>(std::min(value, kMax)));
}

// One completion from either kind of CQ: the ibv_wc fields, and on the timestamped CQ the
// device's stamp in ticks.
struct Completion {
  ibv_wc wc{};
  std::optional<std::uint64_t> stamp;
};

Completion read_stamped(ibv_cq_ex* cq) {
  Completion c;
  c.wc.wr_id = cq->wr_id;
  c.wc.status = cq->status;
  if (c.wc.status != IBV_WC_SUCCESS) return c;
  c.stamp = ibv_wc_read_completion_ts(cq);
  if ((c.wc.wr_id & kSendTag) != 0) return c;
  c.wc.opcode = ibv_wc_read_opcode(cq);
  c.wc.byte_len = ibv_wc_read_byte_len(cq);
  c.wc.src_qp = ibv_wc_read_src_qp(cq);
  c.wc.wc_flags = ibv_wc_read_wc_flags(cq);
  c.wc.slid = static_cast<std::uint16_t>(ibv_wc_read_slid(cq));
  c.wc.sl = ibv_wc_read_sl(cq);
  c.wc.dlid_path_bits = ibv_wc_read_dlid_path_bits(cq);
  return c;
}

std::string gid_family_of(const verbs::PortFacts& port) {
  if (!port.is_ethernet) return "ib";
  static constexpr std::uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(port.gid.data(), kMapped, sizeof(kMapped)) == 0 ? "ipv4" : "ipv6";
}

std::string handle_key(const std::uint8_t* gid, std::uint16_t lid) {
  std::string key(reinterpret_cast<const char*>(gid), 16);
  key.append(reinterpret_cast<const char*>(&lid), sizeof(lid));
  return key;
}

}  // namespace

struct UdPinger::Impl {
  // Declared in creation order, so members are destroyed in reverse: every AH and the QP before
  // the PD, the CQ before its channel.
  LocalPort local;
  std::uint32_t qkey;
  verbs::Context context;
  verbs::PortFacts port;
  verbs::CompletionChannel channel;
  verbs::ProtectionDomain pd;
  verbs::RegisteredBuffer buffer;
  verbs::CompletionQueue cq;        // owns the timestamped CQ too, which ibv_destroy_cq destroys
  ibv_cq_ex* stamped_cq = nullptr;  // `cq` seen as the extended CQ, when it stamps completions
  verbs::QueuePair qp;
  std::map<std::string, std::shared_ptr<verbs::AddressHandle>> handles;
  struct SendSlot {
    bool busy = false;
    Kind kind = Kind::kPing;
    std::uint64_t token = 0;
    std::shared_ptr<verbs::AddressHandle> handle;  // alive until the send completes
    // A pong that promised a follow-up: where the follow-up goes, and the ping's receive stamp
    // its turnaround is timed from.
    bool follow_up = false;
    std::uint32_t reply_qpn = 0;
    std::uint64_t ping_received_ticks = 0;
  };
  std::array<SendSlot, kSendDepth> slots{};
  std::uint32_t next_slot = 0;
  std::map<std::uint64_t, std::uint64_t> ping_sent_ticks;  // by token, until the pong comes
  MeshEndpoint endpoint;
  PingClock clock = PingClock::kSoftware;
  std::string clock_detail;
  std::uint64_t timestamp_mask = 0;
  std::uint64_t clock_khz = 0;

  std::uint8_t* recv_slot(std::uint32_t i) { return buffer.memory.get() + i * kRecvSlotBytes; }
  std::uint8_t* send_slot(std::uint32_t i) {
    return buffer.memory.get() + kRecvDepth * kRecvSlotBytes + i * kSendSlotBytes;
  }

  std::chrono::nanoseconds device_interval(std::uint64_t earlier, std::uint64_t later) const {
    return ticks_to_ns(ticks_between(earlier, later, timestamp_mask), clock_khz);
  }

  void post_recv(std::uint32_t i) {
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(recv_slot(i)),
                static_cast<std::uint32_t>(kRecvSlotBytes), buffer.mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (const int rc = ibv_post_recv(qp.get(), &wr, &bad); rc != 0) {
      throw verbs::VerbsError("ibv_post_recv", rc);
    }
  }

  std::shared_ptr<verbs::AddressHandle> cache(const std::string& key, ibv_ah* created) {
    if (!created) return nullptr;
    auto handle = std::make_shared<verbs::AddressHandle>(created);
    if (handles.size() >= kMaxCachedHandles) handles.clear();
    handles.emplace(key, handle);
    return handle;
  }

  std::shared_ptr<verbs::AddressHandle> handle_to(const MeshEndpoint& peer) {
    const auto key = handle_key(peer.gid.data(), peer.lid);
    if (const auto it = handles.find(key); it != handles.end()) return it->second;
    ibv_ah_attr attr{};
    attr.dlid = peer.lid;
    attr.port_num = local.port;
    // RoCE needs the GRH to route at all; on InfiniBand it costs nothing within a subnet.
    attr.is_global = 1;
    std::memcpy(attr.grh.dgid.raw, peer.gid.data(), peer.gid.size());
    attr.grh.sgid_index = static_cast<std::uint8_t>(port.gid_index);
    attr.grh.hop_limit = 64;
    auto handle = cache(key, ibv_create_ah(pd.get(), &attr));
    if (!handle) spdlog::debug("mesh: ibv_create_ah: {}", std::strerror(errno));
    return handle;
  }

  std::shared_ptr<verbs::AddressHandle> handle_back(ibv_wc& wc, const ibv_grh* grh) {
    // Keyed by the sender's GID, each RoCE v2/IPv4 sender its own (bytes 8..23 would give them
    // all one key); without a GRH (IB, same subnet) by the LID.
    const bool global = (wc.wc_flags & IBV_WC_GRH) != 0;
    const std::array<std::uint8_t, 16> sender =
        global ? verbs::grh_source_gid(reinterpret_cast<const std::uint8_t*>(grh))
               : std::array<std::uint8_t, 16>{};
    const auto key = handle_key(sender.data(), global ? 0 : wc.slid);
    if (const auto it = handles.find(key); it != handles.end()) return it->second;
    auto handle =
        cache(key, ibv_create_ah_from_wc(pd.get(), &wc, const_cast<ibv_grh*>(grh), local.port));
    if (!handle) spdlog::debug("mesh: ibv_create_ah_from_wc: {}", std::strerror(errno));
    return handle;
  }

  // Posts `message` to `qpn` over `sending.handle`; the slot keeps what the completion needs.
  bool post(SendSlot sending, std::uint32_t qpn, const ud_wire::Message& message) {
    if (!sending.handle) return false;
    const std::uint32_t i = next_slot;
    if (slots[i].busy) return false;
    std::uint8_t* bytes = send_slot(i);
    ud_wire::encode(message,
                    std::span<std::uint8_t, ud_wire::kMessageBytes>(bytes, ud_wire::kMessageBytes));
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(bytes),
                static_cast<std::uint32_t>(ud_wire::kMessageBytes), buffer.mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = kSendTag | i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.ud.ah = sending.handle->get();
    wr.wr.ud.remote_qpn = qpn;
    wr.wr.ud.remote_qkey = qkey;
    ibv_send_wr* bad = nullptr;
    if (const int rc = ibv_post_send(qp.get(), &wr, &bad); rc != 0) {
      spdlog::debug("mesh: ibv_post_send: {}", std::strerror(rc));
      return false;
    }
    sending.busy = true;
    sending.kind = message.kind;
    sending.token = message.token;
    slots[i] = std::move(sending);
    next_slot = (i + 1) % kSendDepth;
    return true;
  }

  // The ping's send stamp, taken from the record: a token has one pong.
  std::optional<std::chrono::nanoseconds> device_round_trip(
      std::uint64_t token, std::optional<std::uint64_t> pong_received) {
    const auto it = ping_sent_ticks.find(token);
    if (it == ping_sent_ticks.end()) return std::nullopt;
    const auto sent = it->second;
    ping_sent_ticks.erase(it);
    if (!pong_received) return std::nullopt;
    return device_interval(sent, *pong_received);
  }

  void on_receive(Completion& completion, Events& events) {
    const auto arrived = Clock::now();
    auto& wc = completion.wc;
    const auto slot = static_cast<std::uint32_t>(wc.wr_id);
    std::uint8_t* data = recv_slot(slot);
    std::optional<ud_wire::Message> message;
    if (wc.status == IBV_WC_SUCCESS && wc.byte_len >= kGrhBytes) {
      const std::size_t length = std::min<std::size_t>(wc.byte_len, kRecvSlotBytes) - kGrhBytes;
      message = ud_wire::decode({data + kGrhBytes, length});
    }
    std::shared_ptr<verbs::AddressHandle> back;
    if (message && message->kind == Kind::kPing) {
      back = handle_back(wc, reinterpret_cast<const ibv_grh*>(data));
    }
    // The buffer goes back before the answer is posted: the GRH was read above.
    if (wc.status != IBV_WC_WR_FLUSH_ERR) post_recv(slot);
    if (!message) return;
    switch (message->kind) {
      case Kind::kPing: {
        SendSlot pong;
        pong.handle = std::move(back);
        // Only a prober that reads its own device clock can use the follow-up, and only a
        // stamped receive can start the turnaround.
        pong.follow_up = (message->flags & ud_wire::kAsksFollowUp) != 0 && completion.stamp;
        pong.reply_qpn = wc.src_qp;
        pong.ping_received_ticks = completion.stamp.value_or(0);
        const std::uint8_t flags = pong.follow_up ? ud_wire::kFollowUpComing : 0;
        const auto held = std::chrono::nanoseconds(Clock::now() - arrived);
        if (post(std::move(pong), wc.src_qp,
                 {Kind::kPong, flags, message->token, static_cast<std::uint64_t>(held.count())})) {
          ++events.pings_answered;
        }
        break;
      }
      case Kind::kPong:
        events.pongs.push_back({message->token, arrived, wire_ns(message->turnaround_ns),
                                (message->flags & ud_wire::kFollowUpComing) != 0,
                                device_round_trip(message->token, completion.stamp)});
        break;
      case Kind::kFollowUp:
        if (clock == PingClock::kDevice) {
          events.follow_ups.push_back({message->token, wire_ns(message->turnaround_ns)});
        }
        break;
      default:  // a kind of a later version
        break;
    }
  }

  void on_send_done(const Completion& completion, Events& events) {
    auto& slot = slots[completion.wc.wr_id & ~kSendTag];
    const SendSlot done = std::move(slot);
    slot = SendSlot{};
    const bool sent = completion.wc.status == IBV_WC_SUCCESS;
    if (done.kind == Kind::kPing) {
      if (!sent) {
        events.failed_sends.push_back(done.token);
      } else if (completion.stamp) {
        if (ping_sent_ticks.size() >= kMaxPingStamps)
          ping_sent_ticks.erase(ping_sent_ticks.begin());
        ping_sent_ticks[done.token] = *completion.stamp;
      }
    } else if (done.kind == Kind::kPong && done.follow_up && sent && completion.stamp) {
      // The pong has left: its send stamp closes the turnaround the prober subtracts. A full send
      // queue drops the follow-up, and the prober falls back to the host clock for this ping.
      const auto turnaround = device_interval(done.ping_received_ticks, *completion.stamp);
      SendSlot follow_up;
      follow_up.handle = done.handle;
      post(std::move(follow_up), done.reply_qpn,
           {Kind::kFollowUp, 0, done.token, static_cast<std::uint64_t>(turnaround.count())});
    }
  }

  // Up to one batch of completions; the extended CQ's fields are read between its start and end
  // of polling, so they are handled after it.
  std::size_t poll(std::array<Completion, kUdPollBatch>& batch) {
    if (!stamped_cq) {
      std::array<ibv_wc, kUdPollBatch> wcs{};
      const int n = ibv_poll_cq(cq.get(), static_cast<int>(wcs.size()), wcs.data());
      if (n < 0) throw verbs::VerbsError("ibv_poll_cq", EIO);
      for (int k = 0; k < n; ++k) {
        batch[static_cast<std::size_t>(k)] = {wcs[static_cast<std::size_t>(k)], std::nullopt};
      }
      return static_cast<std::size_t>(n);
    }
    ibv_poll_cq_attr attr{};
    int rc = ibv_start_poll(stamped_cq, &attr);
    if (rc == ENOENT) return 0;
    if (rc != 0) throw verbs::VerbsError("ibv_start_poll", rc);
    std::size_t n = 0;
    do {
      batch[n++] = read_stamped(stamped_cq);
    } while (n < batch.size() && (rc = ibv_next_poll(stamped_cq)) == 0);
    ibv_end_poll(stamped_cq);
    if (rc != 0 && rc != ENOENT) throw verbs::VerbsError("ibv_next_poll", rc);
    return n;
  }

  void drain(Events& events) {
    std::array<Completion, kUdPollBatch> batch{};
    std::size_t n = 0;
    while ((n = poll(batch)) > 0) {
      for (std::size_t k = 0; k < n; ++k) {
        if ((batch[k].wc.wr_id & kSendTag) == 0) {
          on_receive(batch[k], events);
        } else {
          on_send_done(batch[k], events);
        }
      }
    }
  }

  // The CQ that stamps completions when the device has a usable clock, else the plain CQ as
  // before; sets `clock` and says why in `clock_detail`.
  void create_cq() {
    const int entries = static_cast<int>(kRecvDepth + kSendDepth);
    DeviceClockFacts facts;
    ibv_device_attr_ex device{};
    facts.query_error = ibv_query_device_ex(context.get(), nullptr, &device);
    if (facts.query_error == 0) {
      facts.completion_timestamp_mask = device.completion_timestamp_mask;
      facts.hca_core_clock_khz = device.hca_core_clock;
    }
    // Asked of every device, so the log says what the provider answers even where the device
    // reports no timestamps (rxe refuses the flag with EOPNOTSUPP).
    ibv_cq_init_attr_ex attr{};
    attr.cqe = static_cast<std::uint32_t>(entries);
    attr.channel = channel.get();
    attr.wc_flags = kStampedCqFlags;
    errno = 0;
    ibv_cq_ex* created = ibv_create_cq_ex(context.get(), &attr);
    // A provider that refuses without setting errno is reported as not supporting the flag.
    if (!created) facts.timestamp_cq_error = errno != 0 ? errno : EOPNOTSUPP;
    verbs::CompletionQueue stamped(created ? ibv_cq_ex_to_cq(created) : nullptr);
    const auto choice = choose_clock(local.device, facts);
    clock_detail = choice.detail;
    if (choice.device) {
      cq = std::move(stamped);
      stamped_cq = created;
      clock = PingClock::kDevice;
      timestamp_mask = facts.completion_timestamp_mask;
      clock_khz = facts.hca_core_clock_khz;
      return;
    }
    create_plain_cq();
  }

  void create_plain_cq() {
    cq.reset(ibv_create_cq(context.get(), static_cast<int>(kRecvDepth + kSendDepth), nullptr,
                           channel.get(), 0));
    if (!cq) throw verbs::VerbsError("ibv_create_cq", errno);
    stamped_cq = nullptr;
    clock = PingClock::kSoftware;
  }

  ibv_qp* create_qp() {
    ibv_qp_init_attr init{};
    init.send_cq = cq.get();
    init.recv_cq = cq.get();
    init.qp_type = IBV_QPT_UD;
    init.cap.max_send_wr = kSendDepth;
    init.cap.max_recv_wr = kRecvDepth;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    return ibv_create_qp(pd.get(), &init);
  }
};

UdPinger::UdPinger(const LocalPort& local, std::uint32_t qkey) : impl_(std::make_unique<Impl>()) {
  auto& s = *impl_;
  s.local = local;
  s.qkey = qkey;
  s.context = verbs::open_device(local.device);
  s.port = verbs::query_port(s.context.get(), local.port);
  s.channel.reset(ibv_create_comp_channel(s.context.get()));
  if (!s.channel) throw verbs::VerbsError("ibv_create_comp_channel", errno);
  // Non-blocking, so a wake-up without an event never blocks in ibv_get_cq_event.
  const int flags = ::fcntl(s.channel->fd, F_GETFL);
  if (flags < 0 || ::fcntl(s.channel->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    throw verbs::VerbsError("fcntl(O_NONBLOCK) on the completion channel", errno);
  }
  s.pd.reset(ibv_alloc_pd(s.context.get()));
  if (!s.pd) throw verbs::VerbsError("ibv_alloc_pd", errno);
  s.buffer =
      verbs::register_buffer(s.pd.get(), kRecvDepth * kRecvSlotBytes + kSendDepth * kSendSlotBytes);
  s.create_cq();
  s.qp.reset(s.create_qp());
  if (!s.qp && s.clock == PingClock::kDevice) {
    // mlx5 refuses a QP on a CQ of free-running stamps when the device is set to real-time
    // stamps only (EOPNOTSUPP): the mesh then runs on the host clock rather than not at all.
    s.clock_detail = local.device + ": ibv_create_qp(UD) on the timestamped CQ failed (" +
                     std::strerror(errno) + "); host clock";
    s.create_plain_cq();
    s.qp.reset(s.create_qp());
  }
  if (!s.qp) throw verbs::VerbsError("ibv_create_qp(UD)", errno);

  verbs::ud_qp_to_rts(s.qp.get(), local.port, 0, qkey, 0);
  // Before the endpoint below is published: no peer can address the QP yet.
  for (std::uint32_t i = 0; i < kRecvDepth; ++i) s.post_recv(i);
  if (const int rc = ibv_req_notify_cq(s.cq.get(), 0); rc != 0) {
    throw verbs::VerbsError("ibv_req_notify_cq", rc);
  }

  s.endpoint.gid = s.port.gid;
  s.endpoint.lid = s.port.is_ethernet ? 0 : s.port.attr.lid;
  s.endpoint.qpn = s.qp->qp_num;
  s.endpoint.qkey = qkey;
  s.endpoint.gid_family = gid_family_of(s.port);
}

UdPinger::~UdPinger() = default;

const MeshEndpoint& UdPinger::endpoint() const {
  return impl_->endpoint;
}
PingClock UdPinger::clock() const {
  return impl_->clock;
}
const std::string& UdPinger::clock_detail() const {
  return impl_->clock_detail;
}

bool UdPinger::send_ping(const MeshEndpoint& peer, std::uint64_t token) {
  auto& s = *impl_;
  Impl::SendSlot ping;
  ping.handle = s.handle_to(peer);
  const std::uint8_t flags = s.clock == PingClock::kDevice ? ud_wire::kAsksFollowUp : 0;
  return s.post(std::move(ping), peer.qpn, {Kind::kPing, flags, token, 0});
}

UdPinger::Events UdPinger::wait(std::chrono::milliseconds timeout, int wake_fd) {
  auto& s = *impl_;
  Events events;
  std::array<pollfd, 2> fds{pollfd{s.channel->fd, POLLIN, 0}, pollfd{wake_fd, POLLIN, 0}};
  const int ready = ::poll(fds.data(), wake_fd >= 0 ? 2 : 1, static_cast<int>(timeout.count()));
  if (ready < 0 && errno != EINTR) throw verbs::VerbsError("poll on the completion channel", errno);
  if (ready <= 0 || (fds[0].revents & POLLIN) == 0) return events;
  ibv_cq* cq = nullptr;
  void* cq_context = nullptr;
  if (ibv_get_cq_event(s.channel.get(), &cq, &cq_context) != 0) return events;
  ibv_ack_cq_events(cq, 1);
  // Re-armed before the queue is drained: a completion that lands in between raises a new event
  // instead of waiting unseen until the next one.
  if (const int rc = ibv_req_notify_cq(s.cq.get(), 0); rc != 0) {
    throw verbs::VerbsError("ibv_req_notify_cq", rc);
  }
  s.drain(events);
  return events;
}

}  // namespace ibprobe::probes

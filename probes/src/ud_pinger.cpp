#include <endian.h>
#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>

#include "ibprobe/mesh_pinger.h"
#include "verbs.h"

namespace ibprobe::probes {
namespace {

using Clock = std::chrono::steady_clock;

// Every UD receive buffer starts with the 40-byte GRH the HCA writes ahead of the payload.
constexpr std::size_t kGrhBytes = 40;
constexpr std::size_t kRecvSlotBytes = 128;
constexpr std::size_t kSendSlotBytes = 64;
// At 100 pings/s out and as many answered, a second of completions fits in either queue.
constexpr std::uint32_t kRecvDepth = 256;
constexpr std::uint32_t kSendDepth = 256;
constexpr std::uint64_t kSendTag = 1ULL << 63;
// Address handles kept for reuse; beyond this the cache starts over (a send holds its own).
constexpr std::size_t kMaxCachedHandles = 1024;
constexpr std::uint32_t kMagic = 0x49424d50;  // "IBMP"

enum class Kind : std::uint8_t { kPing = 1, kPong = 2 };

// The ping on the wire, big endian, so hosts of either byte order understand each other.
struct Wire {
  std::uint32_t magic;
  std::uint8_t kind;
  std::uint8_t reserved[3];
  std::uint64_t token;
  std::uint64_t turnaround_ns;  // pongs: the responder's hold time
};
static_assert(sizeof(Wire) == 24 && sizeof(Wire) + kGrhBytes <= kRecvSlotBytes);

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

// The sender's GID from the 40 bytes ahead of a UD payload. An InfiniBand or RoCE v2/IPv6 GRH
// (IP version 6) has it at bytes 8..23; for RoCE v2 over IPv4 the device leaves bytes 0..19
// zero and puts the IPv4 header at 20..39, so the sender is its source address (bytes 32..35)
// as an IPv4-mapped GID. Reading bytes 8..23 there would give every IPv4 sender one key.
std::array<std::uint8_t, 16> source_gid(const std::uint8_t* grh) {
  std::array<std::uint8_t, 16> gid{};
  const bool ipv6 = (grh[0] >> 4) == 6;
  if (!ipv6 && (grh[20] >> 4) == 4) {
    gid[10] = 0xff;
    gid[11] = 0xff;
    std::memcpy(gid.data() + 12, grh + 32, 4);
  } else {
    std::memcpy(gid.data(), grh + 8, gid.size());
  }
  return gid;
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
  verbs::CompletionQueue cq;
  verbs::QueuePair qp;
  std::map<std::string, std::shared_ptr<verbs::AddressHandle>> handles;
  struct SendSlot {
    bool busy = false;
    bool ping = false;
    std::uint64_t token = 0;
    std::shared_ptr<verbs::AddressHandle> handle;  // alive until the send completes
  };
  std::array<SendSlot, kSendDepth> slots{};
  std::uint32_t next_slot = 0;
  MeshEndpoint endpoint;
  PingClock clock = PingClock::kSoftware;
  std::string clock_detail;

  std::uint8_t* recv_slot(std::uint32_t i) { return buffer.memory.get() + i * kRecvSlotBytes; }
  std::uint8_t* send_slot(std::uint32_t i) {
    return buffer.memory.get() + kRecvDepth * kRecvSlotBytes + i * kSendSlotBytes;
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
    // The source GID sits at bytes 8..23 of the GRH; without a GRH (IB, same subnet) the LID.
    const bool global = (wc.wc_flags & IBV_WC_GRH) != 0;
    const std::array<std::uint8_t, 16> sender =
        global ? source_gid(reinterpret_cast<const std::uint8_t*>(grh))
               : std::array<std::uint8_t, 16>{};
    const auto key = handle_key(sender.data(), global ? 0 : wc.slid);
    if (const auto it = handles.find(key); it != handles.end()) return it->second;
    auto handle =
        cache(key, ibv_create_ah_from_wc(pd.get(), &wc, const_cast<ibv_grh*>(grh), local.port));
    if (!handle) spdlog::debug("mesh: ibv_create_ah_from_wc: {}", std::strerror(errno));
    return handle;
  }

  bool post(const std::shared_ptr<verbs::AddressHandle>& handle, std::uint32_t qpn, Kind kind,
            std::uint64_t token, std::chrono::nanoseconds turnaround) {
    if (!handle) return false;
    const std::uint32_t i = next_slot;
    if (slots[i].busy) return false;
    auto* wire = reinterpret_cast<Wire*>(send_slot(i));
    *wire = Wire{htobe32(kMagic),
                 static_cast<std::uint8_t>(kind),
                 {},
                 htobe64(token),
                 htobe64(static_cast<std::uint64_t>(turnaround.count()))};
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(wire), sizeof(Wire), buffer.mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = kSendTag | i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.ud.ah = handle->get();
    wr.wr.ud.remote_qpn = qpn;
    wr.wr.ud.remote_qkey = qkey;
    ibv_send_wr* bad = nullptr;
    if (const int rc = ibv_post_send(qp.get(), &wr, &bad); rc != 0) {
      spdlog::debug("mesh: ibv_post_send: {}", std::strerror(rc));
      return false;
    }
    slots[i] = SendSlot{true, kind == Kind::kPing, token, handle};
    next_slot = (i + 1) % kSendDepth;
    return true;
  }

  void on_receive(ibv_wc& wc, Events& events) {
    const auto arrived = Clock::now();
    const auto slot = static_cast<std::uint32_t>(wc.wr_id);
    std::uint8_t* data = recv_slot(slot);
    Wire wire{};
    const bool whole = wc.status == IBV_WC_SUCCESS && wc.byte_len >= kGrhBytes + sizeof(Wire);
    if (whole) std::memcpy(&wire, data + kGrhBytes, sizeof(wire));
    std::optional<std::shared_ptr<verbs::AddressHandle>> back;
    if (whole && be32toh(wire.magic) == kMagic &&
        wire.kind == static_cast<std::uint8_t>(Kind::kPing)) {
      back = handle_back(wc, reinterpret_cast<const ibv_grh*>(data));
    }
    // The buffer goes back before the answer is posted: the GRH was read above.
    if (wc.status != IBV_WC_WR_FLUSH_ERR) post_recv(slot);
    if (!whole || be32toh(wire.magic) != kMagic) return;
    if (back) {
      if (post(*back, wc.src_qp, Kind::kPong, be64toh(wire.token), Clock::now() - arrived)) {
        ++events.pings_answered;
      }
    } else if (wire.kind == static_cast<std::uint8_t>(Kind::kPong)) {
      events.pongs.push_back(
          {be64toh(wire.token), arrived, std::chrono::nanoseconds(be64toh(wire.turnaround_ns))});
    }
  }

  void drain(Events& events) {
    std::array<ibv_wc, 32> wcs{};
    int n = 0;
    while ((n = ibv_poll_cq(cq.get(), static_cast<int>(wcs.size()), wcs.data())) > 0) {
      for (int k = 0; k < n; ++k) {
        auto& wc = wcs[static_cast<std::size_t>(k)];
        if ((wc.wr_id & kSendTag) == 0) {
          on_receive(wc, events);
          continue;
        }
        auto& slot = slots[wc.wr_id & ~kSendTag];
        if (wc.status != IBV_WC_SUCCESS && slot.ping) events.failed_sends.push_back(slot.token);
        slot = SendSlot{};
      }
    }
    if (n < 0) throw verbs::VerbsError("ibv_poll_cq", EIO);
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
  s.cq.reset(ibv_create_cq(s.context.get(), static_cast<int>(kRecvDepth + kSendDepth), nullptr,
                           s.channel.get(), 0));
  if (!s.cq) throw verbs::VerbsError("ibv_create_cq", errno);
  ibv_qp_init_attr init{};
  init.send_cq = s.cq.get();
  init.recv_cq = s.cq.get();
  init.qp_type = IBV_QPT_UD;
  init.cap.max_send_wr = kSendDepth;
  init.cap.max_recv_wr = kRecvDepth;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  s.qp.reset(ibv_create_qp(s.pd.get(), &init));
  if (!s.qp) throw verbs::VerbsError("ibv_create_qp(UD)", errno);

  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = local.port;
  attr.qkey = qkey;
  if (const int rc = ibv_modify_qp(s.qp.get(), &attr,
                                   IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
      rc != 0) {
    throw verbs::VerbsError("ibv_modify_qp(UD INIT)", rc);
  }
  for (std::uint32_t i = 0; i < kRecvDepth; ++i) s.post_recv(i);
  attr = {};
  attr.qp_state = IBV_QPS_RTR;
  if (const int rc = ibv_modify_qp(s.qp.get(), &attr, IBV_QP_STATE); rc != 0) {
    throw verbs::VerbsError("ibv_modify_qp(UD RTR)", rc);
  }
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = 0;
  if (const int rc = ibv_modify_qp(s.qp.get(), &attr, IBV_QP_STATE | IBV_QP_SQ_PSN); rc != 0) {
    throw verbs::VerbsError("ibv_modify_qp(UD RTS)", rc);
  }
  if (const int rc = ibv_req_notify_cq(s.cq.get(), 0); rc != 0) {
    throw verbs::VerbsError("ibv_req_notify_cq", rc);
  }

  s.endpoint.gid = s.port.gid;
  s.endpoint.lid = s.port.is_ethernet ? 0 : s.port.attr.lid;
  s.endpoint.qpn = s.qp->qp_num;
  s.endpoint.qkey = qkey;
  s.endpoint.gid_family = gid_family_of(s.port);

  // The device's completion timestamps would measure the fabric without the hosts' wake-ups;
  // this pinger reads the host's steady clock either way and says what the device offers.
  ibv_device_attr_ex device{};
  const int rc = ibv_query_device_ex(s.context.get(), nullptr, &device);
  const std::string name = local.device;
  if (rc != 0) {
    s.clock_detail = name + ": ibv_query_device_ex failed (" + std::strerror(rc) + "); host clock";
  } else if (device.completion_timestamp_mask == 0) {
    s.clock_detail =
        name + " has no completion timestamps (completion_timestamp_mask 0); host clock";
  } else {
    s.clock_detail = name + " has completion timestamps (completion_timestamp_mask " +
                     std::to_string(device.completion_timestamp_mask) +
                     "), not read by this build; host clock";
  }
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
  return impl_->post(impl_->handle_to(peer), peer.qpn, Kind::kPing, token,
                     std::chrono::nanoseconds(0));
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

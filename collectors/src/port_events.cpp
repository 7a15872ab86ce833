// The port_events collector: one thread waits in one poll() on the async event fd of every
// device the scrapes have named, counts what arrives, and a scrape writes the counts.
//
// Devices are opened by the scrape that first names them, on its own thread, so that the device
// set, its filter and its hot-plug are the scraper's (a device that appears is opened by the
// next scrape), and a device that cannot be opened says so in the scrape that asked. A device
// that failed to open is tried again after kRetryInterval; one closed after a fatal event or
// its removal at the next scrape that still names it (a device registered again comes back at
// once).
//
// The counts of a device stay when it goes: a device registered again under its name continues
// its counters rather than start them over, and a device that does not come back costs a few
// hundred bytes and no series (no scrape names it). A device renamed in place is followed by the
// thread under its new name.
#include "ibprobe/port_events.h"

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <expected>
#include <map>
#include <mutex>
#include <optional>
#include <stop_token>
#include <system_error>
#include <thread>
#include <vector>

#include "collectors_internal.h"
#include "devices.h"
#include "ibprobe/released_by.h"
#include "ibprobe/unique_fd.h"
#include "port_event_log.h"
#include "sysfs.h"

namespace ibprobe::collectors {
namespace {

using EventsClock = std::chrono::steady_clock;
using VerbsContext = std::unique_ptr<ibv_context, ReleasedBy<ibv_close_device>>;
using VerbsDeviceList = std::unique_ptr<ibv_device*, ReleasedBy<ibv_free_device_list>>;

// How soon a device that could not be opened is tried again: opening lists every verbs device.
constexpr auto kRetryInterval = std::chrono::seconds(30);
// How often the thread reads the uverbs node of each open device, for its removal and for a
// rename in place. rxe and siw cannot disassociate a user context, so the kernel sends them no
// event when they are unregistered: it removes their /dev/infiniband/uverbsN and its sysfs node,
// then waits until every process has closed the device (ib_uverbs_remove_one). Looking every
// second, an `rdma link delete` waits a second at most for this exporter. Drivers that can
// disassociate (mlx5, mlx4, hns...) send IBV_EVENT_DEVICE_FATAL first.
constexpr int kRemovalCheckMilliseconds = 1000;

// An event taken from a context, acknowledged when it goes: libibverbs counts unacknowledged
// events, and closing the device waits for none, but destroying an object an event names does.
class AckedAsyncEvent {
 public:
  explicit AckedAsyncEvent(const ibv_async_event& event) : event_(event) {}
  ~AckedAsyncEvent() { ibv_ack_async_event(&event_); }
  AckedAsyncEvent(const AckedAsyncEvent&) = delete;
  AckedAsyncEvent& operator=(const AckedAsyncEvent&) = delete;
  const ibv_async_event& get() const { return event_; }

 private:
  ibv_async_event event_;
};

std::optional<PortEvent> port_event_of(ibv_event_type type) {
  switch (type) {
    case IBV_EVENT_PORT_ACTIVE:
      return PortEvent::kPortActive;
    case IBV_EVENT_PORT_ERR:
      return PortEvent::kPortError;
    case IBV_EVENT_LID_CHANGE:
      return PortEvent::kLidChange;
    case IBV_EVENT_PKEY_CHANGE:
      return PortEvent::kPkeyChange;
    case IBV_EVENT_GID_CHANGE:
      return PortEvent::kGidChange;
    case IBV_EVENT_SM_CHANGE:
      return PortEvent::kSmChange;
    case IBV_EVENT_CLIENT_REREGISTER:
      return PortEvent::kClientReregister;
    default:
      // QP, CQ, SRQ and WQ events name objects of this process's own, and it makes none.
      return std::nullopt;
  }
}

bool state_is_active(int state) {
  return state == IBV_PORT_ACTIVE || state == IBV_PORT_ACTIVE_DEFER;
}

// Why a device's events are not read: `reason` is the label value, `detail` the log's words.
struct EventsClosed {
  std::string_view reason;
  std::string detail;
};

EventsClosed failed_call(std::string_view call, int err) {
  return {to_string(classify_errno(err)), std::string(call) + ": " + std::strerror(err)};
}

struct OpenedDevice {
  std::string name;
  std::string uverbs_path;  // /sys/class/infiniband_verbs/uverbsN
  VerbsContext context;
  std::vector<std::pair<unsigned, bool>> ports_active;  // as the device was opened
};

std::expected<OpenedDevice, EventsClosed> open_for_events(const std::string& name) {
  int count = 0;
  errno = 0;
  const VerbsDeviceList list(ibv_get_device_list(&count));
  if (!list) return std::unexpected(failed_call("ibv_get_device_list", errno ? errno : ENOSYS));
  ibv_device* device = nullptr;
  std::string listed;
  for (int i = 0; i < count; ++i) {
    const std::string_view listed_name = ibv_get_device_name(list.get()[i]);
    if (listed_name == name) device = list.get()[i];
    listed += listed.empty() ? "" : ", ";
    listed += listed_name;
  }
  if (!device) {
    return std::unexpected(EventsClosed{to_string(ReadError::kNotFound),
                                        "libibverbs has no device of that name (it has: " +
                                            (listed.empty() ? "none" : listed) + ")"});
  }
  OpenedDevice opened{name, device->dev_path, VerbsContext(ibv_open_device(device)), {}};
  if (!opened.context) return std::unexpected(failed_call("ibv_open_device", errno));
  const int fd = opened.context->async_fd;
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return std::unexpected(failed_call("fcntl(O_NONBLOCK) on its async event fd", errno));
  }
  ibv_device_attr attributes{};
  if (const int err = ibv_query_device(opened.context.get(), &attributes); err != 0) {
    return std::unexpected(failed_call("ibv_query_device", err));
  }
  for (unsigned port = 1; port <= attributes.phys_port_cnt; ++port) {
    ibv_port_attr port_attributes{};
    if (ibv_query_port(opened.context.get(), static_cast<std::uint8_t>(port), &port_attributes) ==
        0) {
      opened.ports_active.emplace_back(port, state_is_active(port_attributes.state));
    }
  }
  return opened;
}

// The device's name as its uverbs node gives it now (`rdma dev set NAME name NEW` renames a
// device in place), or why the device is gone (unregistered: its node went).
std::expected<std::string, EventsClosed> current_name(const OpenedDevice& device) {
  auto named = read_text(std::filesystem::path(device.uverbs_path) / "ibdev");
  if (!named) return std::unexpected(EventsClosed{"removed", device.uverbs_path + " is gone"});
  return std::move(*named);
}

// The states of the device's ports now, for a device that is known under a new name.
std::vector<std::pair<unsigned, bool>> query_ports_active(const OpenedDevice& device) {
  std::vector<std::pair<unsigned, bool>> ports;
  for (const auto& [port, active_before] : device.ports_active) {
    ibv_port_attr attributes{};
    if (ibv_query_port(device.context.get(), static_cast<std::uint8_t>(port), &attributes) == 0) {
      ports.emplace_back(port, state_is_active(attributes.state));
    }
  }
  return ports;
}

std::optional<unsigned> sysfs_port_number(std::string_view text) {
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

UniqueFd make_wake_fd() {
  UniqueFd fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!fd) throw std::system_error(errno, std::system_category(), "eventfd");
  return fd;
}

constexpr std::string_view kEventsUp = "rdma_device_events_up";
constexpr std::string_view kEventsUpHelp =
    "1 while the device's verbs async events are read; 0 with `reason` when they are not "
    "(not_found: libibverbs has no device of that name; permission_denied: its uverbs node "
    "cannot be opened; device_fatal, removed: it failed or went away; renamed: it is served under "
    "its new name). At 0 the ports' state files are read on each scrape instead.";

class PortEventsCollector final : public Collector {
 public:
  PortEventsCollector()
      : wake_(make_wake_fd()), reader_([this](std::stop_token stop) { read_events(stop); }) {}

  std::string_view name() const override { return kPortEventsCollector; }

  void collect(const Device& device, MetricSet& out, ErrorSink&) const override {
    if (claim_open(device.name)) open(device.name);
    bool events_up = false;
    {
      std::lock_guard lock(mutex_);
      events_up = devices_.at(device.name).open;
    }
    // Read before the lock is taken: other devices' scrapes and the event thread wait on it.
    std::vector<std::pair<unsigned, bool>> polled;
    if (!events_up) {
      for (const auto& port : device.ports) {
        const auto number = sysfs_port_number(port.number);
        const auto text = port.state.read_text();
        if (!number || !text) continue;  // port_info counts an unreadable state file
        if (const auto state = parse_enum_prefix(*text)) {
          polled.emplace_back(*number, state_is_active(*state));
        }
      }
    }
    const auto now = PortEventLog::WallClock::now();
    std::lock_guard lock(mutex_);
    for (const auto& [number, active] : polled)
      log_.observe_state(device.name, number, active, now);
    const DeviceEvents& state = devices_.at(device.name);
    const auto device_labels = out.rendered_label_set(device.identity_labels);
    if (state.open) {
      out.add(kEventsUp, kEventsUpHelp, prometheus::MetricType::Gauge, device_labels, 1);
    } else {
      out.add(kEventsUp, kEventsUpHelp, prometheus::MetricType::Gauge, device_labels,
              {{"reason", state.reason}}, 0);
    }
    if (state.ever_open) log_.write_device(device.name, device_labels, out);
    for (const auto& port : device.ports) {
      const auto number = sysfs_port_number(port.number);
      if (!number) continue;
      log_.write_port(device.name, *number, out.rendered_label_set(port.identity_labels),
                      state.ever_open, out);
    }
  }

 private:
  struct DeviceEvents {
    bool open = false;     // the thread reads its events
    bool opening = false;  // a scrape is opening it
    bool ever_open = false;
    std::string_view reason;  // why not open
    EventsClock::time_point retry_due{};
  };

  // Whether this scrape opens the device now: it is not open, no other scrape is opening it, and
  // its last failure is old enough.
  bool claim_open(const std::string& device) const {
    std::lock_guard lock(mutex_);
    DeviceEvents& state = devices_[device];
    if (state.open || state.opening || EventsClock::now() < state.retry_due) return false;
    state.opening = true;
    return true;
  }

  void open(const std::string& device) const {
    auto opened = open_for_events(device);
    if (opened && reader_stopped()) opened = std::unexpected(*reader_failed_);
    const auto now = PortEventLog::WallClock::now();
    std::lock_guard lock(mutex_);
    DeviceEvents& state = devices_[device];
    state.opening = false;
    if (!opened) {
      if (state.reason != opened.error().reason) {
        spdlog::warn(
            "port_events: {}: async events not read ({}: {}); its ports' state files are read "
            "on each scrape instead",
            device, opened.error().reason, opened.error().detail);
      }
      state.reason = opened.error().reason;
      state.retry_due = EventsClock::now() + kRetryInterval;
      return;
    }
    if (state.open) return;  // the thread follows this device under its new name already
    if (!state.reason.empty()) spdlog::info("port_events: {}: async events read again", device);
    state.open = true;
    state.ever_open = true;
    state.reason = {};
    for (const auto& [port, active] : opened->ports_active) {
      log_.observe_state(device, port, active, now);
    }
    handed_over_.push_back(std::move(*opened));
    wake();
  }

  bool reader_stopped() const {
    std::lock_guard lock(mutex_);
    return reader_failed_.has_value();
  }

  void wake() const {
    const std::uint64_t one = 1;
    // A full counter (2^64 - 2 unread wakes) still wakes the thread.
    [[maybe_unused]] const auto written = ::write(wake_.get(), &one, sizeof one);
  }

  void read_events(std::stop_token stop) {
    std::stop_callback wake_on_stop(stop, [this] { wake(); });
    std::vector<OpenedDevice> watched;
    std::vector<pollfd> fds;
    auto next_removal_check = EventsClock::now();
    while (!stop.stop_requested()) {
      fds.assign(1, pollfd{wake_.get(), POLLIN, 0});
      for (const auto& device : watched) fds.push_back({device.context->async_fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), kRemovalCheckMilliseconds) < 0) {
        if (errno == EINTR) continue;
        const auto failed = failed_call("poll", errno);
        for (auto& device : watched) close_events(device, failed);
        std::lock_guard lock(mutex_);
        reader_failed_ = failed;
        return;
      }
      std::vector<bool> gone(watched.size(), false);
      for (std::size_t i = 0; i < watched.size(); ++i) {
        const short events = fds[i + 1].revents;
        std::optional<EventsClosed> closed;
        if (events & POLLIN) closed = take_events(watched[i]);
        if (!closed && (events & (POLLHUP | POLLERR | POLLNVAL))) {
          closed = EventsClosed{"removed", "its async event fd reports a hangup or an error"};
        }
        if (closed) {
          close_events(watched[i], *closed);
          gone[i] = true;
        }
      }
      if (EventsClock::now() >= next_removal_check) {
        for (std::size_t i = 0; i < watched.size(); ++i) {
          if (gone[i]) continue;
          const auto named = current_name(watched[i]);
          if (!named) {
            close_events(watched[i], named.error());
            gone[i] = true;
          } else if (*named != watched[i].name && !follow_rename(watched[i], *named)) {
            close_events(watched[i], {"renamed", "it is " + *named + " now, read already"});
            gone[i] = true;
          }
        }
        next_removal_check =
            EventsClock::now() + std::chrono::milliseconds(kRemovalCheckMilliseconds);
      }
      std::size_t kept = 0;
      for (std::size_t i = 0; i < watched.size(); ++i) {
        if (gone[i]) continue;
        if (kept != i) watched[kept] = std::move(watched[i]);  // not onto itself: that empties it
        ++kept;
      }
      watched.resize(kept);  // closes the devices that went
      if (fds[0].revents & POLLIN) {
        std::uint64_t wakes = 0;
        [[maybe_unused]] const auto read = ::read(wake_.get(), &wakes, sizeof wakes);
        std::lock_guard lock(mutex_);
        for (auto& device : handed_over_) watched.push_back(std::move(device));
        handed_over_.clear();
      }
    }
  }

  // Counts every event waiting on the device; why its events end, if they do.
  std::optional<EventsClosed> take_events(const OpenedDevice& device) {
    while (true) {
      ibv_async_event raw{};
      if (ibv_get_async_event(device.context.get(), &raw) != 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return std::nullopt;
        return EventsClosed{"removed", std::string("ibv_get_async_event: ") + std::strerror(errno)};
      }
      const AckedAsyncEvent event(raw);
      const auto now = PortEventLog::WallClock::now();
      std::lock_guard lock(mutex_);
      if (event.get().event_type == IBV_EVENT_DEVICE_FATAL) {
        log_.count_device_fatal(device.name);
        return EventsClosed{"device_fatal", "IBV_EVENT_DEVICE_FATAL"};
      }
      if (const auto kind = port_event_of(event.get().event_type)) {
        log_.count(device.name, event.get().element.port_num, *kind, now);
      }
    }
  }

  // A renamed device's events go on under its new name: libibverbs may not list it under that
  // name (rdma-core keeps the names it listed first), so it could not be opened anew. False when
  // the new name's events are read already (renamed back while a scrape opened it afresh).
  bool follow_rename(OpenedDevice& device, const std::string& new_name) {
    const auto ports = query_ports_active(device);
    const auto now = PortEventLog::WallClock::now();
    std::lock_guard lock(mutex_);
    DeviceEvents& renamed = devices_[new_name];
    if (renamed.open) return false;
    spdlog::info("port_events: {} is {} now: its async events are read as {}'s", device.name,
                 new_name, new_name);
    DeviceEvents& before = devices_[device.name];
    before.open = false;
    before.reason = "renamed";
    before.retry_due = {};
    renamed.open = true;
    renamed.ever_open = true;
    renamed.reason = {};
    for (const auto& [port, active] : ports) log_.observe_state(new_name, port, active, now);
    device.name = new_name;
    return true;
  }

  void close_events(const OpenedDevice& device, const EventsClosed& closed) {
    spdlog::warn(
        "port_events: {}: async events no longer read ({}: {}); its ports' state files are read "
        "on each scrape until it can be opened again",
        device.name, closed.reason, closed.detail);
    std::lock_guard lock(mutex_);
    DeviceEvents& state = devices_[device.name];
    state.open = false;
    state.reason = closed.reason;
    state.retry_due = {};  // a device registered again is back at the next scrape
  }

  mutable std::mutex mutex_;
  mutable std::map<std::string, DeviceEvents> devices_;
  mutable PortEventLog log_;
  // Opened by a scrape, for the thread to take into its poll().
  mutable std::vector<OpenedDevice> handed_over_;
  // Why the thread ended before its time (a poll() the kernel refused): no device is read since.
  std::optional<EventsClosed> reader_failed_;
  UniqueFd wake_;        // an eventfd: a device handed over, or the collector going
  std::jthread reader_;  // last: stopped and joined before the members it uses go
};

}  // namespace

std::unique_ptr<Collector> make_port_events_collector() {
  return std::make_unique<PortEventsCollector>();
}

}  // namespace ibprobe::collectors

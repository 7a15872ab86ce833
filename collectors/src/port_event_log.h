// What the port_events collector keeps of each port between scrapes: the verbs async events
// counted by kind, the port's last known state, when it last changed, and its flaps. Fed by the
// event thread (or, where a device cannot be opened, by the state file a scrape reads), written
// by the scrapes; the caller serialises access.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "ibprobe/collectors.h"

namespace ibprobe::collectors {

// The port events of ibv_event_type, as the `event` label names them.
enum class PortEvent : std::uint8_t {
  kPortActive,        // IBV_EVENT_PORT_ACTIVE
  kPortError,         // IBV_EVENT_PORT_ERR
  kLidChange,         // IBV_EVENT_LID_CHANGE
  kPkeyChange,        // IBV_EVENT_PKEY_CHANGE
  kGidChange,         // IBV_EVENT_GID_CHANGE
  kSmChange,          // IBV_EVENT_SM_CHANGE
  kClientReregister,  // IBV_EVENT_CLIENT_REREGISTER
};
inline constexpr std::size_t kPortEventKinds = 7;
std::string_view to_string(PortEvent event);

class PortEventLog {
 public:
  using WallClock = std::chrono::system_clock;

  // One event of a port of `device`. PORT_ACTIVE and PORT_ERR also say the port's state.
  void count(const std::string& device, unsigned port, PortEvent event, WallClock::time_point at);
  void count_device_fatal(const std::string& device);
  // The port's state as something other than an event says it (a query when the device is
  // opened, the state file a scrape reads): a change from the last known state counts as an
  // event would. The first state known of a port is no change.
  void observe_state(const std::string& device, unsigned port, bool active,
                     WallClock::time_point at);

  // rdma_port_flaps_total and rdma_port_last_state_change_timestamp_seconds of `port`, and its
  // rdma_port_events_total when `with_events`; rdma_device_events_total of the device with
  // `with_events`.
  void write_port(const std::string& device, unsigned port, MetricSet::LabelSet labels,
                  bool with_events, MetricSet& out) const;
  void write_device(const std::string& device, MetricSet::LabelSet labels, MetricSet& out) const;

 private:
  enum class State : std::uint8_t { kUnknown, kActive, kDown };
  struct PortRecord {
    std::array<std::uint64_t, kPortEventKinds> events{};
    State state = State::kUnknown;
    // Down after having been ACTIVE: the next return to ACTIVE completes a flap. A port first
    // seen down and then coming up has not flapped.
    bool down_after_active = false;
    std::uint64_t flaps = 0;
    WallClock::time_point last_change{};
    bool changed = false;
  };
  void change_state(PortRecord& record, bool active, WallClock::time_point at);

  std::map<std::pair<std::string, unsigned>, PortRecord> ports_;
  std::map<std::string, std::uint64_t> device_fatal_;
};

}  // namespace ibprobe::collectors

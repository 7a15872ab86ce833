#include "port_event_log.h"

#include "ibprobe/enum_names.h"

namespace ibprobe::collectors {
namespace {

using prometheus::MetricType;

constexpr EnumNames<PortEvent, kPortEventKinds> kPortEventNames{{
    {PortEvent::kPortActive, "port_active"},
    {PortEvent::kPortError, "port_error"},
    {PortEvent::kLidChange, "lid_change"},
    {PortEvent::kPkeyChange, "pkey_change"},
    {PortEvent::kGidChange, "gid_change"},
    {PortEvent::kSmChange, "sm_change"},
    {PortEvent::kClientReregister, "client_reregister"},
}};

constexpr std::string_view kPortEventsFamily = "rdma_port_events_total";
constexpr std::string_view kPortEventsHelp =
    "Verbs async events of the port, by event: port_active, port_error, lid_change, pkey_change, "
    "gid_change, sm_change, client_reregister. Written while the device's events are read "
    "(rdma_device_events_up).";

}  // namespace

std::string_view to_string(PortEvent event) {
  return name_of(kPortEventNames, event, "unknown");
}

void PortEventLog::count(const std::string& device, unsigned port, PortEvent event,
                         WallClock::time_point at) {
  PortRecord& record = ports_[{device, port}];
  ++record.events[static_cast<std::size_t>(event)];
  if (event == PortEvent::kPortActive) change_state(record, true, at);
  if (event == PortEvent::kPortError) change_state(record, false, at);
}

void PortEventLog::count_device_fatal(const std::string& device) {
  ++device_fatal_[device];
}

void PortEventLog::observe_state(const std::string& device, unsigned port, bool active,
                                 WallClock::time_point at) {
  PortRecord& record = ports_[{device, port}];
  if (record.state == State::kUnknown) {
    record.state = active ? State::kActive : State::kDown;
    return;
  }
  change_state(record, active, at);
}

void PortEventLog::change_state(PortRecord& record, bool active, WallClock::time_point at) {
  const State now = active ? State::kActive : State::kDown;
  if (record.state == now) return;  // a repeated event (rxe says ACTIVE on NETDEV_UP and CHANGE)
  if (record.state != State::kUnknown) {
    record.last_change = at;
    record.changed = true;
  }
  if (active && record.down_after_active) ++record.flaps;
  record.down_after_active = !active && record.state == State::kActive;
  record.state = now;
}

void PortEventLog::write_port(const std::string& device, unsigned port, MetricSet::LabelSet labels,
                              bool with_events, MetricSet& out) const {
  const auto found = ports_.find({device, port});
  const PortRecord empty;
  const PortRecord& record = found == ports_.end() ? empty : found->second;
  out.add("rdma_port_flaps_total",
          "Times the port came back to ACTIVE after it had gone down from ACTIVE: one down/up "
          "cycle each, from its async events, or from its state file on each scrape where the "
          "events cannot be read.",
          MetricType::Counter, labels, static_cast<double>(record.flaps));
  if (record.changed) {
    out.add("rdma_port_last_state_change_timestamp_seconds",
            "When the port last went ACTIVE or left it (Unix time), as the exporter saw it; "
            "absent until it changed once.",
            MetricType::Gauge, labels,
            std::chrono::duration<double>(record.last_change.time_since_epoch()).count());
  }
  if (!with_events) return;
  for (std::size_t kind = 0; kind < kPortEventKinds; ++kind) {
    out.add(kPortEventsFamily, kPortEventsHelp, MetricType::Counter, labels,
            {{"event", to_string(static_cast<PortEvent>(kind))}},
            static_cast<double>(record.events[kind]));
  }
}

void PortEventLog::write_device(const std::string& device, MetricSet::LabelSet labels,
                                MetricSet& out) const {
  const auto found = device_fatal_.find(device);
  out.add("rdma_device_events_total",
          "Verbs async events of the device as a whole, by event: device_fatal (the device "
          "failed or is being removed; its events are read again once it can be opened).",
          MetricType::Counter, labels, {{"event", "device_fatal"}},
          found == device_fatal_.end() ? 0.0 : static_cast<double>(found->second));
}

}  // namespace ibprobe::collectors

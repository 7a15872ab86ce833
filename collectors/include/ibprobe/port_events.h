// Port events as they happen: each device's verbs async events (ibv_get_async_event: port
// active and error, LID, P_Key, GID and SM changes, client reregister, device fatal), read by one
// thread for every device, counted by event and port, with each port's flaps (down/up cycles) and
// the time of its last state change. A scrape interval of 15 or 60 s misses a link that drops and
// retrains in 3 s unless a counter happens to move; the events do not.
//
// A device whose events cannot be read (no verbs device of its name, no permission on its
// /dev/infiniband/uverbs node) says so in rdma_device_events_up and once in the log, and its
// ports' state files are read on each scrape instead: flaps shorter than a scrape interval are
// then missed, longer ones still count.
#pragma once

#include <memory>
#include <string_view>

#include "ibprobe/collectors.h"

namespace ibprobe::collectors {

inline constexpr std::string_view kPortEventsCollector = "port_events";

std::unique_ptr<Collector> make_port_events_collector();

}  // namespace ibprobe::collectors

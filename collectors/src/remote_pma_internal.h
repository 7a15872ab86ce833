// The remote PMA collector over any MadTransport, for the unit tests' replayed exchanges.
#pragma once

#include <memory>
#include <vector>

#include "ibprobe/remote_pma.h"
#include "mad_transport.h"

namespace ibprobe::collectors {

// Queries every target within the options' timeout, retries, budget and concurrency.
std::vector<RemotePortCounters> query_remote_ports(MadTransport& transport,
                                                   const RemotePmaOptions& options,
                                                   ErrorSink& errors);

// `port.transport` nullptr: the collector exports ibprobe_remote_pma_up 0 with `port.reason`.
std::unique_ptr<FabricCollector> make_remote_pma_collector(RemotePmaOptions options,
                                                           UmadOpenResult port);

// Adds with saturation at the counter's width, as the hardware counts.
std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b, int width);

}  // namespace ibprobe::collectors

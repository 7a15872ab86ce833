// The remote PMA collector over any MadTransport, for the unit tests' replayed exchanges.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ibprobe/remote_pma.h"
#include "mad_transport.h"
#include "pma_mad.h"

namespace ibprobe::fabric {

// Queries every target within the options' timeout, retries, budget and concurrency.
std::vector<RemotePortCounters> query_remote_ports(MadTransport& transport,
                                                   const RemotePmaOptions& options,
                                                   collectors::ErrorSink& errors);

// `port.transport` nullptr: the collector exports ibprobe_remote_pma_up 0 with `port.reason`.
std::unique_ptr<collectors::FabricCollector> make_remote_pma_collector(RemotePmaOptions options,
                                                                       UmadOpenResult port);

// Whether the PMA's ClassPortInfo announces the 64-bit PortCountersExtended table.
bool has_extended_counters(const mad::ClassPortInfo& info);

// Which counters of each table a PMA really fills, per its ClassPortInfo: drops the others.
void drop_unsupported_basic(const mad::ClassPortInfo& info,
                            std::map<std::string, RemoteCounter, std::less<>>& counters);
void drop_unsupported_extended(const mad::ClassPortInfo& info,
                               std::map<std::string, RemoteCounter, std::less<>>& counters);

// A remote port's PortCounters as the local port's are exported: each counter in its family,
// labelled by `identity`, and the saturation flag of each narrower than 64 bits.
void add_counter_series(collectors::MetricSet& out, collectors::MetricSet::LabelSet identity,
                        const std::map<std::string, RemoteCounter, std::less<>>& counters);

// Adds with saturation at the counter's width, as the hardware counts.
std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b, int width);

}  // namespace ibprobe::fabric

// The remote PMA collector over any MadTransport, for the unit tests' replayed exchanges.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ibprobe/remote_pma.h"
#include "mad_exchange.h"
#include "mad_transport.h"
#include "pma_mad.h"

namespace ibprobe::fabric {

// What a PMA answered to each of mad::kDetailAttributes: learned from the first read that got an
// answer (a value, or "not supported"), so a PMA without them costs no MADs after that.
enum class DetailSupport : std::uint8_t { kUnknown, kSupported, kUnsupported };
using DetailSupports = std::array<DetailSupport, mad::kDetailAttributes.size()>;

// The detail queries of one read of a node: per attribute, the indexes of its queries (one per
// asked port), none for an attribute the PMA is known to lack.
using DetailPlan = std::array<std::vector<std::size_t>, mad::kDetailAttributes.size()>;
void add_detail_queries(std::uint16_t lid, std::uint8_t port, const DetailSupports& support,
                        DetailPlan& plan, std::vector<MadQuery>& queries);

// Learns support from the answers of `plan` and adds the counters of each attribute every asked
// port answered (summed over the ports, as the basic table is).
void take_detail_answers(const DetailPlan& plan, const std::vector<MadExchange::Answer>& answers,
                         const MadExchange& exchange, DetailSupports& support,
                         std::map<std::string, RemoteCounter, std::less<>>& counters);

// What a PMA said of PortExtendedSpeedsCounters, which ClassPortInfo does not announce: learned
// from the first read that asked it.
struct FecCountersSupport {
  enum class State : std::uint8_t { kUnknown, kSupported, kUnsupported };
  State state = State::kUnknown;
  // kUnsupported: not_supported (the PMA answered so), no_answer (it answered PortCounters of
  // the same ports but no attempt at PortExtendedSpeedsCounters; ibsim, for one, drops them).
  std::string_view reason = {};
};

// What the remote PMA collector learned of its targets' PMAs, kept while the exporter runs.
struct RemotePmaMemory {
  std::map<std::uint16_t, DetailSupports> details;  // by LID
  std::map<std::uint16_t, FecCountersSupport> fec;  // by LID
  // By LID and port, once PortInfoExtended answered (or the PMA has no RS-FEC counters).
  std::map<std::pair<std::uint16_t, std::uint8_t>, mad::FecLayout> fec_layouts;
};

// A read's PortExtendedSpeedsCounters query of one port, and its PortCounters query.
struct FecQuery {
  std::size_t extended_speeds;
  std::size_t port_counters;
};

// Learns `support` from the answers to `queries` while it is kUnknown: "not supported" from any
// port, or no answer from any while PortCounters of one answered, is kUnsupported; an answer is
// kSupported. Returns whether it became kUnsupported now (for the caller's one log line).
bool learn_fec_support(const std::vector<FecQuery>& queries,
                       const std::vector<MadExchange::Answer>& answers, const MadExchange& exchange,
                       FecCountersSupport& support);

// Whether a PMA's FEC counters are read, as `family`: 1, or 0 with `reason` when it is switched
// off; nothing while it has not been asked.
void add_fec_support_sample(collectors::MetricSet& out, std::string_view family,
                            std::string_view help, collectors::MetricSet::Labels labels,
                            const FecCountersSupport& support);

// Queries every target within the options' timeout, retries, budget and concurrency. `memory`
// keeps what each LID's PMA said of the optional attributes between calls. With
// `extended_speeds`, the decoded PortExtendedSpeedsCounters by target index (nullopt where not
// read).
std::vector<RemotePortCounters> query_remote_ports(
    MadTransport& transport, const RemotePmaOptions& options, collectors::ErrorSink& errors,
    RemotePmaMemory& memory,
    std::vector<std::optional<mad::ExtendedSpeedsCounters>>* extended_speeds = nullptr);

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
// labelled by `identity`, and the saturation flag of each narrower than 64 bits. The
// PortVLXmitWaitCounters go to rdma_port_vl_transmit_wait_ticks_total, labelled `vl`.
void add_counter_series(collectors::MetricSet& out, collectors::MetricSet::LabelSet identity,
                        const std::map<std::string, RemoteCounter, std::less<>>& counters);

// A port's PortExtendedSpeedsCounters in the FEC families of the link_health collector
// (collectors::kFecCorrectedBlocks, kFecUncorrectableBlocks; lanes from 0, the first `lanes` of
// the 12), plus what only InfiniBand counts: corrected symbols (RS-FEC layout), symbol errors
// per lane, sync header errors and unknown blocks. Each 16- and 32-bit counter has its
// saturation flag; a total summed over lanes is saturated when one of its lanes is.
void add_fec_series(collectors::MetricSet& out, collectors::MetricSet::LabelSet identity,
                    const mad::ExtendedSpeedsCounters& counters, std::size_t lanes);

// Adds with saturation at the counter's width, as the hardware counts.
std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b, int width);

}  // namespace ibprobe::fabric

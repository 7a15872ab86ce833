// The detail attributes only split a base counter of PortCounters: PortRcvErrorDetails sums into
// PortRcvErrors, PortXmitDiscardDetails into PortXmitDiscards, PortVLXmitWaitCounters into
// PortXmitWait. On a port whose base counter stood still they stood still too, so the fabric
// reads a detail attribute again only when its base counter moved, and serves what it kept from
// the last read of it otherwise.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "ibprobe/fabric_model.h"
#include "ibprobe/remote_pma.h"
#include "pma_mad.h"

namespace ibprobe::fabric {

using CounterMap = std::map<std::string, RemoteCounter, std::less<>>;

// The PortCounters counter each of mad::kDetailAttributes splits, in that order.
inline constexpr std::array<std::string_view, mad::kDetailAttributes.size()> kDetailBases = {
    "port_rcv_errors", "port_xmit_discards", "port_xmit_wait"};

// One detail attribute of one port as last answered, and its base counter at that read (nullopt
// where the PMA does not fill it: PortXmitWait without the PortXmitWait capability).
struct KeptDetail {
  std::optional<std::uint64_t> base;
  CounterMap counters;
};

// Per detail attribute; nullopt while there is nothing to serve from: never read, last read lost
// or answered "not supported".
using PortDetails = std::array<std::optional<KeptDetail>, mad::kDetailAttributes.size()>;

using DetailChoice = std::array<bool, mad::kDetailAttributes.size()>;

// Which detail attributes of a port a read asks, given what was kept and the port's PortCounters
// just read (decoded, unsupported counters dropped). An attribute is asked when nothing is kept,
// when its base counter is unknown now or then, moved, or is saturated (a stopped counter hides
// movement); all three when any base counter went down (the PMA or its counters were reset).
DetailChoice details_to_read(const PortDetails& kept, const CounterMap& now);

// The detail state of every switch port read, by (switch GUID, port number). Not thread-safe:
// the fabric guards it with the lock its reads already hold.
using DetailMemory = std::map<std::pair<std::uint64_t, int>, PortDetails>;

// Drops the ports `model` lacks, so the memory is bounded by the fabric's ports and a port that
// comes back in a later discovery is read in full.
void keep_model_ports(DetailMemory& memory, const FabricModel& model);

}  // namespace ibprobe::fabric

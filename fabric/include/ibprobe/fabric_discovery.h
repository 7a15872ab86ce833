// Discovery of the fabric model with rdma-core's libibnetdisc (the library ibnetdiscover and
// ibqueryerrors are built on): directed-route SMPs from one local port, so it needs no SM and no
// LIDs on the way, only on the switches whose PMAs are read afterwards.
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <map>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "ibprobe/fabric.h"
#include "ibprobe/fabric_error.h"
#include "ibprobe/fabric_model.h"

namespace ibprobe::fabric {

struct DiscoveryOptions {
  std::string ca;  // empty: libibnetdisc's choice (the first active port)
  int ca_port = 0;
  std::chrono::milliseconds timeout{300};
  int retries = 2;
  // Names by node GUID that replace node descriptions (--fabric.node-name-map).
  std::map<std::uint64_t, std::string> names;
};

struct DiscoveryResult {
  FabricModel model;
  unsigned mads = 0;  // SMPs the discovery used
};

// kDiscovery when discovery fails (no local port, no answer). The model's SM LID is the local
// port's; its subnet managers are left to query_subnet_managers. Leaks what libibnetdisc leaks
// (rdma-core 44: a LID-map entry per switch port), so a long-running process discovers through
// discover_in_child instead.
std::expected<DiscoveryResult, Error> discover_fabric(const DiscoveryOptions& options);

// SMInfo (SubnGet, LID-routed, decoded by libibmad) from the SM at `sm_lid` (the local port's SM
// LID, where infiniband-diags' sminfo asks) first, then from each of `sm_ports`, with the
// options' MAD timeout and retries. An SM that does not answer, or answers with a reserved
// state, is left out: a missing master is what the caller reports. kLocalPort when the local
// port cannot be opened to ask (nothing is asked when there is no LID to ask).
std::expected<std::vector<SubnetManager>, Error> query_subnet_managers(
    const DiscoveryOptions& options, std::uint16_t sm_lid,
    const std::vector<std::uint16_t>& sm_ports);

// The command line that runs `executable` in that mode for `options` (names are applied by the
// caller, so the map stays in the exporter).
std::vector<std::string> discovery_child_command(const std::filesystem::path& executable,
                                                 const DiscoveryOptions& options);

// Runs `command` (its environment is this process's) and reads its result from its stdout. The
// error names why: kDeadline when the child does not answer within `deadline` (it is killed),
// kStopped when `stop` is requested before it answered (killed too), kChild when it cannot start,
// dies of a signal or exits non-zero (with the child's own error), kMalformedResult when it
// writes anything but a result.
std::expected<DiscoveryResult, Error> discover_in_child(const std::vector<std::string>& command,
                                                        std::chrono::milliseconds deadline,
                                                        std::stop_token stop = {});

// The result as the child writes it and the parent reads it; parsing gives kMalformedResult for
// anything but that form.
std::string discovery_to_json(const DiscoveryResult& result);
std::expected<DiscoveryResult, Error> discovery_from_json(std::string_view text);

// Replaces the descriptions of named nodes, the far ends of cables included.
void apply_node_names(FabricModel& model, const std::map<std::uint64_t, std::string>& names);

}  // namespace ibprobe::fabric

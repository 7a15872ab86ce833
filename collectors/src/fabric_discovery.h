// Discovery of the fabric model with rdma-core's libibnetdisc (the library ibnetdiscover and
// ibqueryerrors are built on): directed-route SMPs from one local port, so it needs no SM and no
// LIDs on the way, only on the switches whose PMAs are read afterwards.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include "fabric_model.h"

namespace ibprobe::collectors {

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

// Throws std::runtime_error when discovery fails (no local port, no answer).
DiscoveryResult discover_fabric(const DiscoveryOptions& options);

}  // namespace ibprobe::collectors

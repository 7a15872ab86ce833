// How the mesh library says it cannot: a kind the caller can act on, and the words for the log.
#pragma once

#include <string>

namespace ibprobe::mesh {

enum class ErrorKind {
  kBadPeerList,   // a peer list that does not parse, or names a peer wrongly
  kUnreadable,    // a peer list file that cannot be read
  kUnresolvable,  // a DNS name of the peers that does not resolve
  kDiscovery,     // the fabric's discovery failed
};

struct Error {
  ErrorKind kind;
  std::string message;
};

}  // namespace ibprobe::mesh

// How the fabric library says it cannot: a kind the caller can act on, and the words for the log.
#pragma once

#include <string>

namespace ibprobe::fabric {

enum class ErrorKind {
  kNodeNameMap,      // a node-name-map that cannot be read, or a line not of its form
  kLocalPort,        // no local InfiniBand port that can send MADs
  kDiscovery,        // libibnetdisc found no fabric from the local port
  kChild,            // the discovery child could not run, died, or exited with an error
  kDeadline,         // the discovery child did not answer in time and was killed
  kStopped,          // a stop was requested before the discovery child answered
  kMalformedResult,  // what the discovery child wrote is not a result
  kTopologyFile,     // a topology file that cannot be read, or a line that does not parse
  kStateFile,        // a state file that cannot be read, written, or is not a saved state
};

struct Error {
  ErrorKind kind;
  std::string message;
};

}  // namespace ibprobe::fabric

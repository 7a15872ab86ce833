#include "ibprobe/probe_failure.h"

namespace ibprobe::probes {

std::string_view to_string(FailureKind kind) {
  switch (kind) {
    case FailureKind::kUnreachable:
      return "unreachable";
    case FailureKind::kRejected:
      return "rejected";
    case FailureKind::kUnauthorized:
      return "unauthorized";
    case FailureKind::kTimeout:
      return "timeout";
    case FailureKind::kPeerLost:
      return "peer_lost";
    case FailureKind::kProtocol:
      return "protocol";
    case FailureKind::kVerbs:
      return "verbs";
    case FailureKind::kCancelled:
      return "cancelled";
    case FailureKind::kInternal:
      break;
  }
  return "internal";
}

}  // namespace ibprobe::probes

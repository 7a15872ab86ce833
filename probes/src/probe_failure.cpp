#include "ibprobe/probe_failure.h"

#include "ibprobe/enum_names.h"

namespace ibprobe::probes {

constexpr EnumNames<FailureKind, 9> kFailureKindNames{{{FailureKind::kUnreachable, "unreachable"},
                                                       {FailureKind::kRejected, "rejected"},
                                                       {FailureKind::kUnauthorized, "unauthorized"},
                                                       {FailureKind::kTimeout, "timeout"},
                                                       {FailureKind::kPeerLost, "peer_lost"},
                                                       {FailureKind::kProtocol, "protocol"},
                                                       {FailureKind::kVerbs, "verbs"},
                                                       {FailureKind::kCancelled, "cancelled"},
                                                       {FailureKind::kInternal, "internal"}}};

std::string_view to_string(FailureKind kind) {
  return name_of(kFailureKindNames, kind, "internal");
}

}  // namespace ibprobe::probes

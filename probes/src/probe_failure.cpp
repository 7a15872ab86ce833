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

Error current_exception_as_error() {
  try {
    throw;
  } catch (const ProbeFailure& failure) {
    return {failure.kind(), failure.what()};
  } catch (const std::invalid_argument& e) {
    return {FailureKind::kRejected, e.what()};
  } catch (const std::exception& e) {
    return {FailureKind::kInternal, e.what()};
  } catch (...) {
    return {FailureKind::kInternal, "unknown exception"};
  }
}

}  // namespace ibprobe::probes

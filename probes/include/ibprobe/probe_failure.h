// How a probe run fails, on either side and at every layer of the probes library.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace ibprobe::probes {

// Why a run failed, in classes a dashboard can group by; the message says the rest.
enum class FailureKind {
  kUnreachable,   // the responder could not be resolved or connected to
  kRejected,      // the responder refused the spec (its limits, its validation) or was busy
  kUnauthorized,  // the shared-secret challenge failed on either side
  kTimeout,       // a deadline passed: handshake, run or result
  kPeerLost,      // the responder closed the connection or reported an error mid-run
  kProtocol,      // the peer spoke something else: bad frame, version, unexpected message
  kVerbs,         // a local verbs call or a completion failed
  kCancelled,     // this side was asked to stop (shutdown)
  kInternal,
};
std::string_view to_string(FailureKind kind);

// A failed run as the library's entry points (run_probe, run_sweep's steps) return it.
struct Error {
  FailureKind kind = FailureKind::kInternal;
  std::string message;
};

// The one conversion of what a run threw into its Error, for the `catch (...)` of an entry point:
// a ProbeFailure keeps its kind, a spec or option the library's own checks refused
// (std::invalid_argument) is kRejected, anything else kInternal.
Error current_exception_as_error();

// A run that cannot go on, thrown inside the library so that unwinding releases every verbs
// resource on the way out; the entry points turn it into an Error.
class ProbeFailure : public std::runtime_error {
 public:
  explicit ProbeFailure(const std::string& what, FailureKind kind = FailureKind::kInternal)
      : std::runtime_error(what), kind_(kind) {}
  FailureKind kind() const { return kind_; }

 private:
  FailureKind kind_;
};

}  // namespace ibprobe::probes

// Both ends of every verification case over one control connection: what the initiator asks,
// the resources each end builds for it, and the two halves of its exchange.
#pragma once

#include <optional>
#include <string_view>

#include "control_channel.h"
#include "ibprobe/verify_plan.h"
#include "protocol.h"
#include "verify_endpoint.h"

namespace ibprobe::probes::verify {

std::optional<Case> parse_case(std::string_view name);

// The request for one case: its spec carries the message size, depths, count or duration and
// RC knobs, so the responder's Limits bound it as they bound a probe.
protocol::VerifyRequest request_for(Case id, const Options& options);

// The resources one end builds for a case; both ends derive them from the same request.
Layout layout_for(Case id, const protocol::VerifyRequest& request, bool initiator);

// Every reason the responder refuses `request`: an unknown case, parameters out of their range,
// a spec validate() rejects or that exceeds `limits` (the soak may run to max_soak_seconds).
std::vector<std::string> check_request(const protocol::VerifyRequest& request,
                                       const Limits& limits);

// The initiator's half, from the peer's endpoints to the merged verdict. The connection has
// been accepted and the peer's QpInfo read.
CaseResult run_case(Case id, const LocalPort& local, ControlChannel& channel,
                    const protocol::VerifyRequest& request, const protocol::QpInfo& peer);

// The responder's half, after the request was checked: accepts, builds, serves, reports.
void serve_case(Case id, const LocalPort& local, ControlChannel& channel,
                const protocol::VerifyRequest& request);

// The responder's entry for a VerifyRequest (authenticated already): refuses it with the reasons
// check_request() finds, or serves the case.
void serve_verify(ControlChannel& channel, const protocol::VerifyRequest& request,
                  const LocalPort& local, const Limits& limits,
                  ControlChannel::Deadline setup_deadline);

}  // namespace ibprobe::probes::verify

// The two-sided verification suite against a peer's responder: each case on its own connection
// and fresh resources, judged against the pass criterion printed with it (verify_plan.h).
#pragma once

#include <expected>
#include <string>
#include <vector>

#include "ibprobe/verbs_probe.h"
#include "ibprobe/verify_plan.h"

namespace ibprobe::probes::verify {

// Runs the plan's cases one after another, each on its own connection and resources, from
// `local` against the responder at HOST:PORT. A case that fails or cannot run on this device is
// reported in its row; only a responder that cannot be reached at all throws.
std::vector<CaseResult> run_verify(const LocalPort& local, const std::string& host,
                                   const std::string& port, const ValidPlan& plan,
                                   const RunOptions& run_options = {});

// Unless all of them fit, every reason a responder with `limits` would refuse one of the plan's
// cases.
std::expected<void, SpecViolations> check_limits(const ValidPlan& plan, const Limits& limits);

}  // namespace ibprobe::probes::verify

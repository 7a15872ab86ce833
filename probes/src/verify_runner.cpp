// The suite's driver on the initiator and its entry on the responder: one connection and one set
// of resources per case, so a case that leaves a QP in ERR or a CQ full of flushed work cannot
// touch the next one.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <stdexcept>

#include "ibprobe/verify.h"
#include "peer_auth.h"
#include "run_common.h"
#include "verify_cases.h"

namespace ibprobe::probes::verify {
namespace {

using Clock = std::chrono::steady_clock;

CaseResult run_one(Case id, const LocalPort& local, const std::string& host,
                   const std::string& port, const std::vector<IpAddress>& addresses,
                   const Options& options, const RunOptions& run_options, const StopSignal& stop) {
  auto request = request_for(id, options);
  auto setup_deadline =
      Clock::now() + std::min<Clock::duration>(kHandshakeTimeout,
                                               std::chrono::seconds(request.spec.timeout_seconds));
  if (run_options.deadline) setup_deadline = std::min(setup_deadline, *run_options.deadline);
  const peer_auth::InitiatorAuth auth(run_options.shared_secret);
  auto greeting = greet(host, port, addresses, setup_deadline, auth, stop, run_options.gate);
  auto& channel = greeting.channel;
  request.authenticator = auth.authenticator(greeting.hello, request);
  channel.send(request, setup_deadline);
  channel.expect<protocol::ProbeAccept>(setup_deadline, "the responder's answer to the case");
  const auto peer = channel.expect<protocol::QpInfo>(setup_deadline, "the responder's QPs");
  return run_case(id, local, channel, request, peer);
}

}  // namespace

std::vector<CaseResult> run_verify(const LocalPort& local, const std::string& host,
                                   const std::string& port, const ValidPlan& plan,
                                   const RunOptions& run_options) {
  const auto& options = plan.options();
  const StopSignal stop(run_options.stop);
  const auto addresses = addresses_to_connect(host, port, run_options);
  std::vector<CaseResult> results;
  for (const auto id : plan.cases()) {
    throw_if_cancelled(stop);
    const auto start = Clock::now();
    CaseResult result{id, Verdict::kFail, 0, {}};
    try {
      result = run_one(id, local, host, port, addresses, options, run_options, stop);
    } catch (const ProbeFailure& failure) {
      // Nobody to run the suite against: no table to print.
      if (failure.kind() == FailureKind::kUnreachable) throw;
      result.details.push_back(fmt::format("the case could not complete ({}): {}",
                                           to_string(failure.kind()), failure.what()));
    }
    result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    results.push_back(std::move(result));
  }
  return results;
}

std::expected<void, SpecViolations> check_limits(const ValidPlan& plan, const Limits& limits) {
  std::vector<std::string> problems;
  for (const auto id : plan.cases()) {
    for (const auto& problem : check_request(request_for(id, plan.options()), limits)) {
      problems.push_back(std::string(info(id).name) + ": " + problem);
    }
  }
  if (!problems.empty()) return std::unexpected(SpecViolations{std::move(problems)});
  return {};
}

void serve_verify(ControlChannel& channel, const protocol::VerifyRequest& request,
                  const LocalPort& local, const Limits& limits,
                  ControlChannel::Deadline setup_deadline) {
  if (const auto problems = check_request(request, limits); !problems.empty()) {
    channel.send(protocol::ProbeReject{fmt::to_string(fmt::join(problems, "; "))}, setup_deadline);
    return;
  }
  spdlog::info("verify case {} for {}", request.case_name, channel.peer());
  serve_case(*parse_case(request.case_name), local, channel, request);
}

}  // namespace ibprobe::probes::verify

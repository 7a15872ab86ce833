#include "probe_api.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <climits>
#include <cmath>
#include <sstream>

#include "ibprobe/spec_json.h"
#include "probe_metrics.h"
#include "probe_request.h"
#include "runs_page.h"

namespace ibprobe::exporter {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kTooManyWaiting =
    "too many requests are waiting for probes on this exporter; try again later";
constexpr int kWaitingRetryAfterSeconds = 1;
constexpr double kMaxApiWaitSeconds = 300;
constexpr std::size_t kDefaultListLimit = 20;

HttpResponse json_response(int status, const json& body) {
  HttpResponse response;
  response.status = status;
  response.content_type = "application/json";
  response.body = body.dump() + "\n";
  return response;
}

// Errors share one shape: {"error": {"code": "...", "message": "..."}}.
HttpResponse json_error(int status, const std::string& code, const std::string& message,
                        std::optional<int> retry_after = std::nullopt) {
  auto response = json_response(status, {{"error", {{"code", code}, {"message", message}}}});
  if (retry_after) response.headers.emplace_back("Retry-After", std::to_string(*retry_after));
  return response;
}

HttpResponse text_error(int status, const std::string& message,
                        std::optional<int> retry_after = std::nullopt) {
  HttpResponse response;
  response.status = status;
  response.body = message + "\n";
  if (retry_after) response.headers.emplace_back("Retry-After", std::to_string(*retry_after));
  return response;
}

// A refused request as /probe answers it (text, as blackbox_exporter does) and as the API does.
HttpResponse text_error(const Refusal& refusal) {
  return text_error(refusal.status, refusal.message, refusal.retry_after_seconds);
}

HttpResponse json_error(const Refusal& refusal) {
  return json_error(refusal.status, refusal.code, refusal.message, refusal.retry_after_seconds);
}

double unix_seconds(std::chrono::system_clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

json deltas_json(const std::vector<probes::CounterDelta>& deltas) {
  json out = json::array();
  for (const auto& d : deltas) {
    json entry = {{"counter", d.counter},
                  {"status", std::string(probes::to_string(d.status))},
                  {"error_class", d.error_class},
                  {"class", d.counter_class}};
    entry["delta"] = d.delta ? json(*d.delta) : json(nullptr);
    if (d.priority) entry["priority"] = *d.priority;
    out.push_back(std::move(entry));
  }
  return out;
}

json outcome_json(const probes::ProbeOutcome& outcome) {
  json out = {{"peer", outcome.peer},
              {"gid_index", outcome.gid_index},
              {"numa_node", outcome.numa_node},
              {"mtu", outcome.mtu},
              {"connection", probes::to_string(outcome.spec.connection)},
              {"connected_by", probes::connected_by(outcome.spec)},
              {"lane",
               {{"sl", outcome.lane.sl},
                {"traffic_class", outcome.lane.traffic_class},
                {"pkey_index", outcome.lane.pkey_index}}},
              {"setup_seconds", outcome.setup_seconds},
              {"window_seconds", outcome.window_seconds},
              {"used",
               {{"rx_depth", outcome.spec.rx_depth},
                {"cq_moderation", outcome.cq_moderation},
                {"inline_size", outcome.inline_size},
                {"relaxed_ordering", outcome.relaxed_ordering},
                {"outstanding_reads", outcome.outstanding_reads},
                {"post_calls", outcome.post_calls},
                {"completions", outcome.completions},
                {"completion_mode", outcome.spec.cq_events ? "events" : "polling"},
                {"cq_events", outcome.cq_events}}}};
  json peer_used = json::object();
  if (outcome.peer_gid_index >= 0) peer_used["gid_index"] = outcome.peer_gid_index;
  peer_used["numa_node"] = outcome.peer_numa_node;
  if (outcome.peer_inline_size) peer_used["inline_size"] = *outcome.peer_inline_size;
  if (outcome.peer_relaxed_ordering) peer_used["relaxed_ordering"] = *outcome.peer_relaxed_ordering;
  out["peer_used"] = std::move(peer_used);
  if (const auto& d = outcome.delivery) {
    out["delivery"] = {{"sent", d->sent}, {"received", d->received}, {"lost", d->lost()}};
  }
  if (const auto& bw = outcome.bandwidth) {
    out["bandwidth"] = {
        {"messages", bw->messages},
        {"seconds", bw->seconds},
        {"bytes_per_second", bw->bytes_per_second},
        {"mebibytes_per_second", probes::mebibytes_per_second(bw->bytes_per_second)},
        {"messages_per_second", bw->messages_per_second}};
    out["bandwidth"]["peak_bytes_per_second"] =
        bw->peak_bytes_per_second ? json(*bw->peak_bytes_per_second) : json(nullptr);
  }
  for (const auto& [name, direction] : {std::pair{"initiator", &outcome.initiator_direction},
                                        std::pair{"responder", &outcome.responder_direction}}) {
    if (*direction) {
      out["directions"][name] = {{"messages", (*direction)->messages},
                                 {"bytes_per_second", (*direction)->bytes_per_second},
                                 {"messages_per_second", (*direction)->messages_per_second}};
    }
  }
  if (outcome.rate_limiter) {
    out["used"]["rate_limiter"] = std::string(probes::to_string(*outcome.rate_limiter));
  }
  if (outcome.peer_rate_limiter) {
    out["peer_used"]["rate_limiter"] = std::string(probes::to_string(*outcome.peer_rate_limiter));
  }
  if (const auto& lat = outcome.latency_duration) {
    out["latency"] = {{"iterations", lat->iterations},
                      {"t_avg_us", lat->average_ns / 1e3},
                      {"transactions_per_second", lat->transactions_per_second}};
  }
  if (const auto& lat = outcome.latency) {
    out["latency"] = {{"samples", lat->samples},           {"t_min_us", lat->min_ns / 1e3},
                      {"t_max_us", lat->max_ns / 1e3},     {"t_typical_us", lat->typical_ns / 1e3},
                      {"t_avg_us", lat->average_ns / 1e3}, {"t_stdev_us", lat->stdev_ns / 1e3},
                      {"p99_us", lat->p99_ns / 1e3},       {"p99_9_us", lat->p99_9_ns / 1e3}};
  }
  json checks = json::array();
  for (const auto& c : outcome.checks) {
    // A check with nothing to check neither passed nor failed.
    checks.push_back({{"side", c.side},
                      {"name", c.name},
                      {"applicable", c.applicable},
                      {"passed", c.applicable ? json(c.passed) : json(nullptr)},
                      {"detail", c.detail}});
  }
  out["checks"] = std::move(checks);
  json fabric = json::object();
  for (const auto& f : outcome.fabric_deltas) fabric[f.port] = deltas_json(f.deltas);
  out["deltas"] = {{"local", deltas_json(outcome.local_deltas)},
                   {"peer", deltas_json(outcome.peer_deltas)},
                   {"fabric", std::move(fabric)}};
  const auto& link = outcome.link;
  out["link"] = {{"diagnosis", std::string(probes::to_string(link.diagnosis))},
                 {"explanation", link.explanation},
                 {"moved_error_counters", link.moved_error_counters},
                 {"probe_backpressure_counters", link.probe_backpressure_counters}};
  out["link"]["link_bytes_per_second"] =
      link.link_bytes_per_second ? json(*link.link_bytes_per_second) : json(nullptr);
  out["link"]["line_rate_ratio"] =
      link.line_rate_ratio ? json(*link.line_rate_ratio) : json(nullptr);
  if (!outcome.verify_results.empty()) {
    json cases = json::array();
    for (const auto& r : outcome.verify_results) {
      cases.push_back({{"case", probes::verify::info(r.id).name},
                       {"checks", probes::verify::info(r.id).checks},
                       {"result", probes::verify::to_string(r.verdict)},
                       {"seconds", r.seconds},
                       {"details", r.details}});
    }
    out["verify"] = {{"cases", std::move(cases)},
                     {"table", probes::verify::format_table(outcome.verify_results)}};
  }
  if (const auto& v = outcome.validation) {
    out["validation"] = {{"messages_sent", v->messages_sent},
                         {"messages_received", v->messages_received},
                         {"messages_checked", v->checked},
                         {"errors", v->errors},
                         {"skipped", {{"overwritten", v->skipped_overwritten}}},
                         {"transient",
                          {{"races", v->races},
                           {"rechecks", v->rechecks},
                           {"tail_checks", v->tail_checks},
                           {"stale_completions", v->stale_completions}}}};
    out["validation"]["first_error"] =
        v->first_error.empty() ? json(nullptr) : json(v->first_error);
  }
  return out;
}

// The sweep's table: each step's value and its result (or why it failed), and the knee.
json sweep_json(const probes::SweepOutcome& sweep) {
  json steps = json::array();
  for (std::size_t i = 0; i < sweep.steps.size(); ++i) {
    const auto& step = sweep.steps[i];
    json entry = {{"step", i}, {"value", step.value}, {"success", step.outcome.has_value()}};
    if (step.outcome) {
      entry["result"] = outcome_json(*step.outcome);
    } else {
      entry["failure"] = {{"reason", std::string(probes::to_string(step.failure))},
                          {"message", step.error}};
    }
    steps.push_back(std::move(entry));
  }
  json out = {{"variable", std::string(probes::to_string(sweep.sweep.variable))},
              {"values", sweep.sweep.values},
              {"knee_threshold", sweep.sweep.knee_threshold},
              {"steps", std::move(steps)}};
  out["knee"] = sweep.knee ? json{{"step", *sweep.knee}, {"value", sweep.steps[*sweep.knee].value}}
                           : json(nullptr);
  return out;
}

// The run's story for debug=true: what was asked, what ran, what came of it.
std::string debug_log(const ProbeRun& run) {
  std::ostringstream out;
  out << "Probe id " << run.id << ": module " << run.module << " against " << run.target << "\n";
  out << "Resolved module: " << probes::spec_to_json(run.resolved.spec).dump() << "\n";
  if (!run.resolved.fabric_ports.empty()) {
    out << "Fabric ports: " << json(run.resolved.fabric_ports).dump() << "\n";
  }
  out << "State: " << to_string(run.state) << " after " << run.duration_seconds << " s\n";
  if (run.sweep) {
    for (std::size_t i = 0; i < run.sweep->steps.size(); ++i) {
      const auto& step = run.sweep->steps[i];
      out << "Step " << i << " (" << probes::to_string(run.sweep->sweep.variable) << "="
          << step.value << "): "
          << (step.outcome ? "ok, " + step.outcome->link.explanation : "FAILED: " + step.error)
          << "\n";
    }
  }
  if (!run.succeeded() && run.sweep) {
    out << "Failure (" << run.failure_reason << "): " << run.failure << "\n";
  } else if (run.outcome) {
    for (const auto& c : run.outcome->checks) {
      out << "Check " << c.side << "/" << c.name << ": "
          << (!c.applicable ? "not applicable"
              : c.passed    ? "passed"
                            : "FAILED")
          << " (" << c.detail << ")\n";
    }
    out << "Link: " << run.outcome->link.explanation << "\n";
  } else if (!run.sweep) {
    out << "Failure (" << run.failure_reason << "): " << run.failure << "\n";
  }
  return out.str();
}

std::optional<std::uint64_t> parse_id(std::string_view text) {
  std::uint64_t id = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return id;
}

}  // namespace

nlohmann::json run_to_json(const ProbeRun& run) {
  json out = {{"id", std::to_string(run.id)},
              {"target", run.target},
              {"module", run.module},
              {"state", std::string(to_string(run.state))},
              {"submitted", unix_seconds(run.submitted)},
              {"spec", probes::spec_to_json(run.resolved.spec)}};
  if (run.state != RunState::kQueued) out["started"] = unix_seconds(run.started);
  if (run.state == RunState::kSucceeded || run.state == RunState::kFailed) {
    out["finished"] = unix_seconds(run.finished);
    out["duration_seconds"] = run.duration_seconds;
    out["success"] = run.succeeded();
  }
  if (run.outcome) out["result"] = outcome_json(*run.outcome);
  if (run.sweep) out["sweep"] = sweep_json(*run.sweep);
  if (run.state == RunState::kFailed) {
    out["failure"] = {{"reason", run.failure_reason}, {"message", run.failure}};
  }
  if (const auto& trigger = run.trigger) {
    out["trigger"] = {{"alertname", trigger->alertname},
                      {"fingerprint", trigger->fingerprint},
                      {"starts_at", trigger->starts_at},
                      {"labels", trigger->labels}};
  }
  return out;
}

HttpResponse ProbeApi::probe(const HttpRequest& request) const {
  const auto received = std::chrono::steady_clock::now();
  auto parsed = parse_probe_query(request.query);
  if (!parsed) return text_error(400, parsed.error());
  auto& params = parsed.value();
  const auto scrape = scrape_budget_seconds(request.headers);
  if (!scrape) return text_error(400, scrape.error());
  if (const auto usable = *scrape) {
    params.timeout_seconds =
        params.timeout_seconds ? std::min(*params.timeout_seconds, *usable) : *usable;
  }
  const WaitingSlot slot(*this);
  if (!slot) return text_error(503, kTooManyWaiting, kWaitingRetryAfterSeconds);
  const auto finished = service_.run(params, received, request.client_stop());
  if (!finished) return text_error(finished.error());
  const auto& run = finished.value();
  HttpResponse response;
  response.content_type = "text/plain; version=0.0.4; charset=utf-8";
  probe_run_metrics(run, false).append_text(response.body);
  if (params.debug) {
    response.content_type = "text/plain; charset=utf-8";
    response.body = "Logs for the probe:\n" + debug_log(run) +
                    "\n\nMetrics that would have been returned:\n" + response.body;
  }
  return response;
}

HttpResponse ProbeApi::start(const HttpRequest& request) const {
  const auto parsed = parse_probe_json(request.body);
  if (!parsed) {
    return json_error(400, "bad_request", parsed.error());
  }
  const auto& params = parsed.value();
  const auto submitted = service_.submit(params);
  if (!submitted) return json_error(submitted.error());
  const auto id = std::to_string(submitted.value());
  auto response =
      json_response(202, {{"id", id}, {"state", "queued"}, {"href", "/api/v1/probes/" + id}});
  response.headers.emplace_back("Location", "/api/v1/probes/" + id);
  return response;
}

HttpResponse ProbeApi::list(const HttpRequest& request) const {
  const auto query = parse_query(request.query);
  if (!query) {
    return json_error(400, "bad_request", query.error());
  }
  std::size_t limit = kDefaultListLimit;
  for (const auto& [name, value] : query.value()) {
    if (name != "limit") return json_error(400, "bad_request", "unknown parameter '" + name + "'");
    const auto parsed = parse_id(value);
    if (!parsed || *parsed == 0 || *parsed > 4096) {
      return json_error(400, "bad_request", "limit must be a number from 1 to 4096");
    }
    limit = *parsed;
  }
  json runs = json::array();
  for (const auto& run : service_.recent(limit)) runs.push_back(run_to_json(run));
  return json_response(200, {{"probes", std::move(runs)}});
}

HttpResponse ProbeApi::runs_page() const {
  constexpr std::size_t kRunsShown = 200;
  HttpResponse response;
  response.content_type = "text/html; charset=utf-8";
  response.body = render_runs_page(service_.recent(kRunsShown));
  return response;
}

HttpResponse ProbeApi::get(const HttpRequest& request, std::string_view id_text) const {
  const auto id = parse_id(id_text);
  if (!id) return json_error(400, "bad_request", "probe id must be a number");
  const auto query = parse_query(request.query);
  if (!query) {
    return json_error(400, "bad_request", query.error());
  }
  double wait = 0;
  for (const auto& [name, value] : query.value()) {
    if (name != "wait") return json_error(400, "bad_request", "unknown parameter '" + name + "'");
    const auto parsed = parse_wait_seconds(value);
    if (!parsed || *parsed > kMaxApiWaitSeconds) {
      return json_error(400, "bad_request",
                        "wait must be a duration of at most " +
                            std::to_string(static_cast<int>(kMaxApiWaitSeconds)) + "s");
    }
    wait = *parsed;
  }
  std::optional<WaitingSlot> slot;
  if (wait > 0) {
    slot.emplace(*this);
    if (!*slot) {
      return json_error(503, "too_many_waiting", kTooManyWaiting, kWaitingRetryAfterSeconds);
    }
  }
  const auto run = service_.get(
      *id,
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(wait)),
      wait > 0 ? request.client_stop() : std::stop_token{});
  if (!run) {
    return json_error(
        404, "not_found",
        "no probe with id " + std::string(id_text) + " (unknown, or past the history)");
  }
  return json_response(200, run_to_json(*run));
}

HttpResponse ProbeApi::reload() const {
  if (const auto reloaded = service_.reload(); !reloaded) {
    return json_error(400, "invalid_config", reloaded.error());
  }
  json modules = json::array();
  for (const auto& [name, _] : service_.config()->modules) modules.push_back(name);
  return json_response(200, {{"status", "reloaded"}, {"modules", std::move(modules)}});
}

collectors::MetricSet ProbeApi::metrics() const {
  return last_result_metrics(service_.last_results(), service_.totals());
}

collectors::MetricSet ProbeApi::alert_metrics() const {
  return alert_receiver_.metrics();
}

HttpResponse ProbeApi::alerts(const HttpRequest& request) const {
  const auto message = parse_alertmanager_webhook(request.body);
  if (!message) {
    alert_receiver_.malformed();
    return json_error(400, "bad_webhook", message.error());
  }
  const auto answer = alert_receiver_.receive(
      *message, request.headers.contains(std::string(AlertReceiver::kSentOnHeader)));
  json started = json::array();
  for (const auto& run : answer.started) {
    const auto id = std::to_string(run.run_id);
    started.push_back({{"alertname", run.alertname},
                       {"fingerprint", run.fingerprint},
                       {"id", id},
                       {"href", "/api/v1/probes/" + id}});
  }
  json dispatched = json::array();
  for (const auto& sent : answer.dispatched) {
    dispatched.push_back({{"alertname", sent.alertname},
                          {"fingerprint", sent.fingerprint},
                          {"exporter", sent.exporter}});
  }
  json dropped = json::array();
  for (const auto& drop : answer.dropped) {
    dropped.push_back({{"alertname", drop.alertname},
                       {"fingerprint", drop.fingerprint},
                       {"reason", drop.reason},
                       {"message", drop.detail}});
  }
  return json_response(200, {{"started", std::move(started)},
                             {"sent_on", std::move(dispatched)},
                             {"dropped", std::move(dropped)},
                             {"resolved", answer.resolved}});
}

}  // namespace ibprobe::exporter

#include "alert_receiver.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <utility>

namespace ibprobe::exporter {
namespace {

using Labels = collectors::MetricSet::Labels;
using prometheus::MetricType;

// Alerts whose last run /metrics shows; older ones leave, as runs leave the history.
constexpr std::size_t kMaxTriggered = 64;

std::string label_or_empty(const WebhookAlert& alert, const std::string& name) {
  const auto it = alert.labels.find(name);
  return it == alert.labels.end() ? std::string() : it->second;
}

bool matches(const AlertRule& rule, const WebhookAlert& alert) {
  if (label_or_empty(alert, "alertname") != rule.alertname) return false;
  return std::ranges::all_of(rule.match, [&](const auto& matcher) {
    const auto it = alert.labels.find(matcher.first);
    return it != alert.labels.end() && it->second == matcher.second;
  });
}

// The host part of an `instance` label ("host", "host:9470" or "[v6]:9470").
std::string instance_host(const std::string& instance) {
  const auto parsed = parse_target(instance);
  return parsed ? parsed->first : instance;
}

// A label name Prometheus accepts that is not reserved: an alert's labels came from a
// Prometheus, but the webhook is an open door.
bool exportable_label_name(const std::string& name) {
  if (name.empty() || name.starts_with("__")) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

// The alert's identifying labels as the verdict's series carry them: every label but the job and
// instance Prometheus adds to what it scrapes from this exporter (the alert's instance becomes
// alert_instance), then the run's module and target.
Labels verdict_labels(const ProbeRun& run) {
  Labels labels;
  for (const auto& [name, value] : run.trigger->labels) {
    if (name == "job" || name == "probe_module" || name == "probe_target" ||
        !exportable_label_name(name)) {
      continue;
    }
    labels.emplace_back(name == "instance" ? "alert_instance" : name, value);
  }
  labels.emplace_back("probe_module", run.module);
  labels.emplace_back("probe_target", run.target);
  return labels;
}

Labels with(Labels labels, std::string name, std::string value) {
  labels.emplace_back(std::move(name), std::move(value));
  return labels;
}

void add_verdict(collectors::MetricSet& out, const ProbeRun& run) {
  const Labels labels = verdict_labels(run);
  const auto gauge = [&](std::string_view family, std::string_view help, const Labels& l,
                         double value) { out.add(family, help, MetricType::Gauge, l, value); };
  std::string diagnosis;
  if (run.outcome) diagnosis = std::string(probes::to_string(run.outcome->link.diagnosis));
  gauge("ibprobe_alert_probe_info",
        "1 for the last probe an alert started, with its run id, state, failure reason and "
        "diagnosis, labelled with the alert's labels.",
        with(with(with(with(labels, "run_id", std::to_string(run.id)), "state",
                       std::string(to_string(run.state))),
                  "failure_reason", run.failure_reason),
             "diagnosis", diagnosis),
        1);
  if (!run.done()) return;
  gauge("ibprobe_alert_probe_success", "1 when the last probe an alert started succeeded.", labels,
        run.succeeded() ? 1 : 0);
  if (!run.outcome) return;
  const auto& outcome = *run.outcome;
  if (outcome.bandwidth) {
    gauge("ibprobe_alert_probe_bandwidth_bytes_per_second",
          "BW average of the last probe an alert started.", labels,
          outcome.bandwidth->bytes_per_second);
  }
  if (outcome.latency) {
    gauge("ibprobe_alert_probe_latency_typical_seconds",
          "t_typical of the last latency probe an alert started.", labels,
          outcome.latency->typical_ns * 1e-9);
  }
  if (outcome.link.line_rate_ratio) {
    gauge("ibprobe_alert_probe_line_rate_ratio",
          "BW of the last probe an alert started over the port's line rate.", labels,
          *outcome.link.line_rate_ratio);
  }
  // The error-class counters that moved during the run, by side: what the page should say.
  for (const auto& [side, deltas] :
       {std::pair{"local", &outcome.local_deltas}, std::pair{"peer", &outcome.peer_deltas}}) {
    for (const auto& delta : *deltas) {
      if (!delta.error_class || !delta.delta || *delta.delta == 0) continue;
      gauge("ibprobe_alert_probe_error_counter_delta",
            "Increase of an error-class counter during the last probe an alert started.",
            with(with(labels, "side", side), "counter", delta.counter), *delta.delta);
    }
  }
}

std::string rfc3339(std::chrono::system_clock::time_point t) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(t);
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::string figure(double value, int precision) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.*f", precision, value);
  return text;
}

// How the run went, in one word and in a sentence a paged person reads.
std::pair<std::string, std::string> verdict_of(const ProbeRun& run) {
  const std::string what = run.module + " to " + run.target;
  if (!run.succeeded()) {
    return {"failed", what + " failed (" + run.failure_reason + "): " + run.failure};
  }
  if (!run.outcome) return {"healthy", what + " succeeded"};
  const auto& outcome = *run.outcome;
  std::string figures;
  if (outcome.bandwidth) {
    figures = "BW " + figure(outcome.bandwidth->bytes_per_second / 1e6, 1) + " MB/s";
    if (outcome.link.line_rate_ratio) {
      figures += " (" + figure(*outcome.link.line_rate_ratio * 100, 1) + " % of line rate)";
    }
  }
  if (outcome.latency) {
    figures = "t_typical " + figure(outcome.latency->typical_ns / 1e3, 2) + " us";
  }
  std::string moved;
  for (const auto& [side, deltas] :
       {std::pair{"local", &outcome.local_deltas}, std::pair{"peer", &outcome.peer_deltas}}) {
    for (const auto& delta : *deltas) {
      if (!delta.error_class || !delta.delta || *delta.delta == 0) continue;
      moved += (moved.empty() ? "" : ", ") + std::string(side) + ":" + delta.counter + " +" +
               figure(*delta.delta, 0);
    }
  }
  if (!moved.empty()) {
    return {"errors_moved",
            what + ": error counters moved during the run: " + moved + "; " + figures};
  }
  return {"healthy", what + " healthy: " + figures + ", no error counter moved"};
}

}  // namespace

nlohmann::json verdict_alert(const ProbeRun& run, std::chrono::system_clock::time_point now,
                             std::chrono::seconds lasts) {
  auto labels = nlohmann::json::object();
  for (const auto& [name, value] : run.trigger->labels) labels[name] = value;
  labels["alertname"] = "IbprobeProbeVerdict";
  labels["verdict_for"] = run.trigger->alertname;
  const auto [verdict, summary] = verdict_of(run);
  labels["verdict"] = verdict;
  return {{"labels", labels},
          {"annotations",
           {{"summary", summary},
            {"run", "/api/v1/probes/" + std::to_string(run.id)},
            {"trigger_starts_at", run.trigger->starts_at}}},
          {"startsAt", rfc3339(now)},
          {"endsAt", rfc3339(now + lasts)}};
}

AlertReceiver::AlertReceiver(ProbeService& service, std::string host_name,
                             std::optional<HttpUrl> alertmanager,
                             std::function<Clock::time_point()> now)
    : service_(service),
      host_name_(std::move(host_name)),
      now_(std::move(now)),
      alertmanager_(std::move(alertmanager)) {
  if (alertmanager_) pusher_ = std::jthread([this](std::stop_token stop) { push_verdicts(stop); });
}

AlertReceiver::~AlertReceiver() {
  pusher_.request_stop();
  verdict_ready_.notify_all();
}

void AlertReceiver::push_verdicts(std::stop_token stop) {
  // A run's end is polled: the scheduler has no completion callback, and a verdict a second late
  // is on time for a page.
  constexpr auto kPoll = std::chrono::milliseconds(500);
  constexpr auto kPushTimeout = std::chrono::seconds(5);
  while (!stop.stop_requested()) {
    std::vector<ProbeRun> finished;
    std::chrono::seconds lasts{0};
    {
      std::unique_lock lock(mutex_);
      verdict_ready_.wait_for(lock, stop, kPoll, [] { return false; });
      std::erase_if(awaiting_verdict_, [&](std::uint64_t id) {
        auto run = service_.get(id, std::chrono::milliseconds(0));
        if (run && !run->done()) return false;
        if (run && run->trigger) finished.push_back(std::move(*run));
        return true;
      });
      lasts = service_.config()->alerts.repeat;
    }
    for (const auto& run : finished) {
      const auto body =
          nlohmann::json::array({verdict_alert(run, std::chrono::system_clock::now(), lasts)});
      auto url = *alertmanager_;
      url.path = "/api/v2/alerts";
      const auto reply = post_json(url, body.dump(), Clock::now() + kPushTimeout);
      std::string result = "sent";
      if (!reply) {
        result = "failed";
        spdlog::warn("the verdict of probe id={} did not reach Alertmanager at {}:{}: {}", run.id,
                     url.host, url.port, reply.error());
      } else if (reply->status / 100 != 2) {
        result = "refused";
        spdlog::warn("Alertmanager at {}:{} refused the verdict of probe id={}: HTTP {} {}",
                     url.host, url.port, run.id, reply->status, reply->body.substr(0, 200));
      } else {
        spdlog::info("verdict of probe id={} for alert {} pushed to Alertmanager", run.id,
                     run.trigger->alertname);
      }
      std::lock_guard lock(mutex_);
      ++pushed_[result];
    }
  }
}

std::size_t AlertReceiver::in_flight_locked() const {
  std::erase_if(in_flight_, [&](std::uint64_t id) {
    const auto run = service_.get(id, std::chrono::milliseconds(0));
    return !run || run->done();
  });
  return in_flight_.size();
}

std::expected<std::uint64_t, AlertReceiver::Dropped> AlertReceiver::answer(
    const WebhookAlert& alert, const AlertResponse& response) {
  const std::string alertname = label_or_empty(alert, "alertname");
  const auto drop = [&](std::string reason, std::string detail) {
    return std::unexpected(
        Dropped{alertname, alert.fingerprint, std::move(reason), std::move(detail)});
  };
  const auto rule = std::ranges::find_if(
      response.rules, [&](const AlertRule& candidate) { return matches(candidate, alert); });
  if (rule == response.rules.end()) {
    return drop("no_rule", "no alert rule matches alert '" + alertname + "'");
  }
  const std::string self = response.instance.empty() ? host_name_ : response.instance;
  if (const auto instance = label_or_empty(alert, "instance");
      !instance.empty() && instance_host(instance) != self) {
    return drop("other_instance",
                "the alert is about instance '" + instance + "', this exporter is '" + self + "'");
  }
  const std::string module =
      rule->module.empty() ? label_or_empty(alert, rule->module_label) : rule->module;
  if (module.empty()) {
    return drop("no_module",
                "the alert has no label '" + rule->module_label + "' to name a module");
  }
  const std::string peer =
      rule->peer.empty() ? label_or_empty(alert, rule->peer_label) : rule->peer;
  if (peer.empty()) {
    return drop("no_peer", "the alert has no label '" + rule->peer_label + "' to name a peer");
  }
  const auto now = now_();
  if (const auto last = last_started_.find(alert.fingerprint);
      last != last_started_.end() && now - last->second < response.repeat) {
    return drop(
        "repeat",
        "a run for this alert started " +
            std::to_string(
                std::chrono::duration_cast<std::chrono::seconds>(now - last->second).count()) +
            " s ago, within the repeat window of " + std::to_string(response.repeat.count()) +
            " s");
  }
  if (in_flight_locked() >= response.max_in_flight) {
    return drop("in_flight_limit", std::to_string(response.max_in_flight) +
                                       " alert-started runs are queued or running already");
  }
  ProbeParams params;
  params.target = peer;
  params.module = module;
  params.trigger = AlertTrigger{alertname, alert.fingerprint, alert.starts_at, alert.labels};
  const auto submitted = service_.submit(params);
  if (!submitted) return drop(submitted.error().code, submitted.error().message);
  last_started_[alert.fingerprint] = now;
  in_flight_.push_back(*submitted);
  if (alertmanager_) awaiting_verdict_.push_back(*submitted);
  return *submitted;
}

AlertReceiver::Answer AlertReceiver::receive(const WebhookMessage& message) {
  const auto config = service_.config();
  std::lock_guard lock(mutex_);
  // Windows that have passed are forgotten, so the map holds only the alerts of one window.
  const auto now = now_();
  std::erase_if(last_started_,
                [&](const auto& entry) { return now - entry.second >= config->alerts.repeat; });
  Answer answer;
  for (const auto& alert : message.alerts) {
    ++notifications_[alert.firing ? "firing" : "resolved"];
    if (!alert.firing) {
      ++answer.resolved;
      continue;
    }
    auto run = this->answer(alert, config->alerts);
    if (!run) {
      ++dropped_[run.error().reason];
      spdlog::info("alert {} fingerprint={} starts no probe ({}): {}", run.error().alertname,
                   alert.fingerprint, run.error().reason, run.error().detail);
      answer.dropped.push_back(std::move(run).error());
      continue;
    }
    ++started_;
    const std::string alertname = label_or_empty(alert, "alertname");
    spdlog::info("alert {} fingerprint={} started probe id={}", alertname, alert.fingerprint, *run);
    const std::string key = alertname + "/" + alert.fingerprint;
    std::erase_if(triggered_, [&](const Triggered& t) { return t.key == key; });
    triggered_.push_back({key, *run});
    if (triggered_.size() > kMaxTriggered) triggered_.pop_front();
    answer.started.push_back({alertname, alert.fingerprint, *run});
  }
  return answer;
}

void AlertReceiver::malformed() {
  std::lock_guard lock(mutex_);
  ++malformed_;
}

collectors::MetricSet AlertReceiver::metrics() const {
  collectors::MetricSet out;
  std::vector<std::uint64_t> runs;
  {
    std::lock_guard lock(mutex_);
    for (const char* status : {"firing", "resolved"}) {
      const auto it = notifications_.find(status);
      out.add("ibprobe_alert_notifications_total",
              "Alerts received from Alertmanager's webhook, by status.", MetricType::Counter,
              {{"status", status}},
              it == notifications_.end() ? 0 : static_cast<double>(it->second));
    }
    out.add("ibprobe_alert_webhooks_malformed_total",
            "Webhook messages refused as malformed (400).", MetricType::Counter, {},
            static_cast<double>(malformed_));
    out.add("ibprobe_alert_probes_started_total", "Probes started by firing alerts.",
            MetricType::Counter, {}, static_cast<double>(started_));
    for (const auto& [reason, count] : dropped_) {
      out.add("ibprobe_alert_probes_dropped_total",
              "Firing alerts that started no probe, by reason (no_rule, other_instance, "
              "no_module, no_peer, repeat, in_flight_limit, or the scheduler's refusal: "
              "queue_full, target_not_allowed, unknown_module, bad_target, ...).",
              MetricType::Counter, {{"reason", reason}}, static_cast<double>(count));
    }
    for (const auto& [result, count] : pushed_) {
      out.add("ibprobe_alert_verdicts_pushed_total",
              "Verdicts of alert-started runs pushed to Alertmanager (--alerts.alertmanager-url), "
              "by result: sent, refused (not 2xx), failed (not delivered).",
              MetricType::Counter, {{"result", result}}, static_cast<double>(count));
    }
    for (const auto& t : triggered_) runs.push_back(t.run_id);
  }
  for (const auto id : runs) {
    const auto run = service_.get(id, std::chrono::milliseconds(0));
    if (run && run->trigger) add_verdict(out, *run);
  }
  return out;
}

}  // namespace ibprobe::exporter

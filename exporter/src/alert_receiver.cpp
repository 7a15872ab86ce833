#include "alert_receiver.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "human_text.h"
#include "ibprobe/mesh_peers.h"

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

// Alertmanager's API takes RFC 3339 times.
constexpr const char* kRfc3339 = "%Y-%m-%dT%H:%M:%SZ";

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
    figures = "BW " + fixed_point(outcome.bandwidth->bytes_per_second / 1e6, 1) + " MB/s";
    if (outcome.link.line_rate_ratio) {
      figures += " (" + fixed_point(*outcome.link.line_rate_ratio * 100, 1) + " % of line rate)";
    }
  }
  if (outcome.latency) {
    figures = "t_typical " + fixed_point(outcome.latency->typical_ns / 1e3, 2) + " us";
  }
  std::string moved;
  for (const auto& [side, deltas] :
       {std::pair{"local", &outcome.local_deltas}, std::pair{"peer", &outcome.peer_deltas}}) {
    for (const auto& delta : *deltas) {
      if (!delta.error_class || !delta.delta || *delta.delta == 0) continue;
      moved += (moved.empty() ? "" : ", ") + std::string(side) + ":" + delta.counter + " +" +
               fixed_point(*delta.delta, 0);
    }
  }
  if (!moved.empty()) {
    return {"errors_moved",
            what + ": error counters moved during the run: " + moved + "; " + figures};
  }
  return {"healthy", what + " healthy: " + figures + ", no error counter moved"};
}

// The first word of a node description ("node-0113 mlx5_0": Linux sets a CA's to the host name
// and the device), or of any label value naming a host.
std::string first_word(const std::string& text) {
  const auto start = text.find_first_not_of(" \t");
  if (start == std::string::npos) return {};
  return text.substr(start, text.find_first_of(" \t", start) - start);
}

// FNV-1a: the same peer for a fingerprint on every exporter and every run, unlike std::hash.
std::uint64_t stable_hash(std::string_view text) {
  std::uint64_t hash = 14695981039346656037ULL;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ULL;
  }
  return hash;
}

bool rule_needs_peer_list(const AlertRule& rule) {
  return rule.peer_choice != PeerChoice::kNone || !rule.run_from_label.empty();
}

}  // namespace

std::expected<std::string, std::string> choose_peer(const PeerList& list,
                                                    std::string_view from_host, PeerChoice choice,
                                                    std::string_view fingerprint) {
  const auto in_list = " in the peer list (" + std::to_string(list.peers.size()) + " hosts from " +
                       list.source + ")";
  const auto from = std::ranges::find_if(list.peers, [&](const mesh::MeshPeer& peer) {
    return list.self.empty() ? instance_host(peer.target) == from_host : peer.target == list.self;
  });
  if (from == list.peers.end()) {
    return std::unexpected("host '" + (list.self.empty() ? std::string(from_host) : list.self) +
                           "' is not" + in_list);
  }
  if (from->tor.empty()) {
    return std::unexpected("host '" + std::string(from_host) + "' has no leaf (tor)" + in_list);
  }
  std::vector<std::string> candidates;
  for (const auto& peer : list.peers) {
    const auto host = instance_host(peer.target);
    if (host == instance_host(from->target) || peer.tor.empty()) continue;
    if ((peer.tor == from->tor) == (choice == PeerChoice::kSameLeaf)) candidates.push_back(host);
  }
  if (candidates.empty()) {
    return std::unexpected(
        "no other host " +
        std::string(choice == PeerChoice::kSameLeaf ? "behind leaf '" : "outside leaf '") +
        from->tor + "'" + in_list);
  }
  std::ranges::sort(candidates);
  return candidates[stable_hash(fingerprint) % candidates.size()];
}

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
          {"startsAt", utc_text(now, kRfc3339)},
          {"endsAt", utc_text(now + lasts, kRfc3339)}};
}

AlertReceiver::AlertReceiver(ProbeService& service, SelfNames::Sources self_names,
                             std::optional<HttpUrl> alertmanager,
                             std::function<Clock::time_point()> now)
    : service_(service),
      host_name_(self_names.host_name()),
      self_names_(std::move(self_names)),
      now_(std::move(now)),
      alertmanager_(std::move(alertmanager)),
      sender_([this](std::stop_token stop) { send(stop); }) {}

AlertReceiver::~AlertReceiver() {
  sender_.request_stop();
  work_.notify_all();
}

void AlertReceiver::send(std::stop_token stop) {
  // A run's end is polled: the scheduler has no completion callback, and a verdict a second late
  // is on time for a page.
  constexpr auto kPoll = std::chrono::milliseconds(500);
  constexpr auto kRequestTimeout = std::chrono::seconds(5);
  while (!stop.stop_requested()) {
    std::vector<ProbeRun> finished;
    std::deque<Outgoing> dispatches;
    std::chrono::seconds lasts{0};
    {
      std::unique_lock lock(mutex_);
      work_.wait_for(lock, stop, kPoll, [this] { return !to_dispatch_.empty(); });
      dispatches.swap(to_dispatch_);
      // Idle (nothing to send, no verdict awaited): the scheduler is not asked anything.
      if (dispatches.empty() && awaiting_verdict_.empty()) continue;
      std::erase_if(awaiting_verdict_, [&](std::uint64_t id) {
        auto run = service_.get(id, std::chrono::milliseconds(0));
        if (run && !run->done()) return false;
        if (run && run->trigger) finished.push_back(std::move(*run));
        return true;
      });
      lasts = service_.config()->alerts.repeat;
    }
    const auto post = [&](const Outgoing& out, const std::string& what) {
      std::vector<std::string> headers{std::string(kSentOnHeader) + ": " + host_name_};
      if (!out.authorization.empty()) headers.push_back("Authorization: " + out.authorization);
      const auto reply =
          post_json(out.url, out.body, Clock::now() + kRequestTimeout, headers, out.tls);
      const std::string where = out.url.host + ":" + out.url.port;
      if (!reply) {
        spdlog::warn("{} did not reach {}: {}", what, where, reply.error());
        return std::string("failed");
      }
      if (reply->status / 100 != 2) {
        spdlog::warn("{} refused by {}: HTTP {} {}", what, where, reply->status,
                     reply->body.substr(0, 200));
        return std::string("refused");
      }
      spdlog::info("{} sent to {}", what, where);
      return std::string("sent");
    };
    for (const auto& out : dispatches) {
      const auto result = post(out, "an alert sent on");
      std::lock_guard lock(mutex_);
      ++dispatches_[result];
    }
    for (const auto& run : finished) {
      auto url = *alertmanager_;
      url.path = "/api/v2/alerts";
      const auto body =
          nlohmann::json::array({verdict_alert(run, std::chrono::system_clock::now(), lasts)});
      const auto result =
          post({url, body.dump(), ""}, "the verdict of probe id=" + std::to_string(run.id));
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

void AlertReceiver::set_peer_directory(PeerDirectory directory, std::string responder_port) {
  std::lock_guard lock(mutex_);
  peer_directory_ = std::move(directory);
  responder_port_ = std::move(responder_port);
}

std::expected<PeerList, std::string> AlertReceiver::read_peer_list(
    const AlertResponse& response) const {
  if (!response.peers_file.empty()) {
    auto peers = mesh::load_file_sd(response.peers_file);
    if (!peers) return std::unexpected("alerts.peers_file: " + peers.error().message);
    return PeerList{std::move(*peers), "alerts.peers_file " + response.peers_file};
  }
  PeerDirectory directory;
  {
    std::lock_guard lock(mutex_);
    directory = peer_directory_;
  }
  if (!directory) {
    return std::unexpected(
        std::string("no peer list: set alerts.peers_file or run the mesh (mesh.enabled)"));
  }
  return directory();
}

std::expected<std::variant<std::uint64_t, AlertReceiver::Dispatched>, AlertReceiver::Dropped>
AlertReceiver::answer(const WebhookAlert& alert, const AlertRule* rule,
                      const AlertResponse& response,
                      const std::optional<std::expected<PeerList, std::string>>& peers,
                      bool sent_on) {
  const std::string alertname = label_or_empty(alert, "alertname");
  const auto drop = [&](std::string reason, std::string detail) {
    return std::unexpected(
        Dropped{alertname, alert.fingerprint, std::move(reason), std::move(detail)});
  };
  if (!rule) return drop("no_rule", "no alert rule matches alert '" + alertname + "'");
  const auto now = now_();
  const auto repeated =
      [&](const std::map<std::string, Clock::time_point>& answered) -> std::optional<Dropped> {
    const auto last = answered.find(alert.fingerprint);
    if (last == answered.end() || now - last->second >= response.repeat) return std::nullopt;
    const auto ago = std::chrono::duration_cast<std::chrono::seconds>(now - last->second);
    return Dropped{alertname, alert.fingerprint, "repeat",
                   "this alert was answered " + std::to_string(ago.count()) +
                       " s ago, within the repeat window of " +
                       std::to_string(response.repeat.count()) + " s"};
  };
  std::string instance = label_or_empty(alert, "instance");
  if (!rule->run_from_label.empty()) {
    const std::string named = label_or_empty(alert, rule->run_from_label);
    const std::string host = first_word(named);
    if (host.empty()) {
      return drop("no_host", "the alert has no label '" + rule->run_from_label +
                                 "' to name the host to probe from");
    }
    if (!peers->has_value()) return drop("no_peer_list", peers->error());
    const auto& list = peers->value();
    const auto known = std::ranges::find_if(
        list.peers, [&](const mesh::MeshPeer& peer) { return instance_host(peer.target) == host; });
    if (known == list.peers.end()) {
      return drop("not_a_host", rule->run_from_label + " '" + named + "' names no host of the " +
                                    "peer list (" + std::to_string(list.peers.size()) +
                                    " hosts from " + list.source + ")");
    }
    // The list's target is that host's exporter, its port included.
    instance = known->target;
  }
  // An alert sent on by another receiver was sent to the address its instance names, which is
  // where this exporter listens, whatever name it was given: it runs here and goes no further,
  // so no alert can loop.
  if (!instance.empty() && !sent_on &&
      !self_names_.names_this_exporter(instance, response.instance)) {
    const std::string why =
        "the alert is about instance '" + instance +
        "', which names no address, name or port of this exporter (" + host_name_ +
        (response.instance.empty() ? "" : ", alerts.instance '" + response.instance + "'") + ")";
    if (response.dispatch_port == 0) return drop("other_instance", why);
    const auto address = parse_instance(instance);
    if (!address) return drop("other_instance", why + ", nor any exporter's address");
    if (auto again = repeated(last_sent_on_)) return std::unexpected(std::move(*again));
    if (to_dispatch_.size() >= kMaxQueuedDispatches) {
      return drop("dispatch_queue_full",
                  std::to_string(kMaxQueuedDispatches) + " alerts wait to be sent on already");
    }
    const auto port = address->port && response.dispatch_to_instance_port ? *address->port
                                                                          : response.dispatch_port;
    HttpUrl url{address->host, std::to_string(port), "/api/v1/alerts",
                response.dispatch_tls.has_value()};
    // One alert per message, as Alertmanager would send it: the other exporter's receiver
    // answers it by its own rules, its own repeat window and bounds.
    const nlohmann::json message = {{"version", "4"},
                                    {"status", "firing"},
                                    {"receiver", "ibprobe-sent-on"},
                                    {"alerts",
                                     {{{"status", "firing"},
                                       {"labels", alert.labels},
                                       {"annotations", nlohmann::json::object()},
                                       {"startsAt", alert.starts_at},
                                       {"fingerprint", alert.fingerprint}}}}};
    Dispatched dispatched{alertname, alert.fingerprint, url.host + ":" + url.port};
    to_dispatch_.push_back({std::move(url), message.dump(), response.dispatch_authorization,
                            response.dispatch_tls.value_or(TlsClientOptions{})});
    work_.notify_all();
    last_sent_on_[alert.fingerprint] = now;
    return dispatched;
  }

  const std::string module =
      rule->module.empty() ? label_or_empty(alert, rule->module_label) : rule->module;
  if (module.empty()) {
    return drop("no_module",
                "the alert has no label '" + rule->module_label + "' to name a module");
  }
  std::string peer = rule->peer.empty() ? label_or_empty(alert, rule->peer_label) : rule->peer;
  if (rule->peer_choice != PeerChoice::kNone) {
    if (!peers->has_value()) return drop("no_peer_list", peers->error());
    const auto& list = peers->value();
    std::vector<std::string> targets;
    for (const auto& candidate : list.peers) targets.push_back(candidate.target);
    const auto own =
        list.self.empty() ? self_names_.find_in(targets, response.instance) : list.self;
    const auto chosen = choose_peer(list, own.empty() ? host_name_ : instance_host(own),
                                    rule->peer_choice, alert.fingerprint);
    if (!chosen) return drop("no_peer", chosen.error());
    peer = *chosen + ":" + responder_port_;
  } else if (peer.empty()) {
    return drop("no_peer", "the alert has no label '" + rule->peer_label + "' to name a peer");
  }
  if (auto again = repeated(last_started_)) return std::unexpected(std::move(*again));
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

AlertReceiver::Answer AlertReceiver::receive(const WebhookMessage& message, bool sent_on) {
  const auto config = service_.config();
  // Read at the first alert whose rule needs it, outside the lock, and once per message.
  std::optional<std::expected<PeerList, std::string>> peers;
  {
    std::lock_guard lock(mutex_);
    // Windows that have passed are forgotten, so the map holds only the alerts of one window.
    const auto now = now_();
    for (auto* answered : {&last_started_, &last_sent_on_}) {
      std::erase_if(*answered,
                    [&](const auto& entry) { return now - entry.second >= config->alerts.repeat; });
    }
  }
  Answer answer;
  for (const auto& alert : message.alerts) {
    const auto matching =
        std::ranges::find_if(config->alerts.rules,
                             [&](const AlertRule& candidate) { return matches(candidate, alert); });
    const AlertRule* rule = matching == config->alerts.rules.end() ? nullptr : &*matching;
    if (alert.firing && rule && rule_needs_peer_list(*rule) && !peers) {
      peers = read_peer_list(config->alerts);
    }
    // Alert by alert: a message of a thousand alerts never holds /metrics (metrics()) back for
    // longer than one of them takes.
    std::lock_guard lock(mutex_);
    ++notifications_[alert.firing ? "firing" : "resolved"];
    if (!alert.firing) {
      ++answer.resolved;
      continue;
    }
    auto run = this->answer(alert, rule, config->alerts, peers, sent_on);
    if (run && std::holds_alternative<Dispatched>(*run)) {
      ++dispatched_;
      answer.dispatched.push_back(std::get<Dispatched>(std::move(*run)));
      continue;
    }
    if (!run) {
      ++dropped_[run.error().reason];
      // One line per message says how many and why (below): a storm of a thousand alerts
      // would otherwise write a thousand lines.
      spdlog::debug("alert {} fingerprint={} starts no probe ({}): {}", run.error().alertname,
                    alert.fingerprint, run.error().reason, run.error().detail);
      answer.dropped.push_back(std::move(run).error());
      continue;
    }
    ++started_;
    const auto id = std::get<std::uint64_t>(*run);
    const std::string alertname = label_or_empty(alert, "alertname");
    spdlog::info("alert {} fingerprint={} started probe id={}", alertname, alert.fingerprint, id);
    const std::string key = alertname + "/" + alert.fingerprint;
    Triggered entry{key, {}};
    if (const auto known = std::ranges::find(triggered_, key, &Triggered::key);
        known != triggered_.end()) {
      entry = std::move(*known);
      triggered_.erase(known);
    }
    entry.run_ids.push_back(id);
    if (entry.run_ids.size() > kRunsPerAlert) entry.run_ids.erase(entry.run_ids.begin());
    triggered_.push_back(std::move(entry));
    if (triggered_.size() > kMaxTriggered) triggered_.pop_front();
    answer.started.push_back({alertname, alert.fingerprint, id});
  }
  if (!answer.dropped.empty()) {
    std::map<std::string, std::size_t> by_reason;
    for (const auto& drop : answer.dropped) ++by_reason[drop.reason];
    std::string reasons;
    for (const auto& [reason, count] : by_reason) {
      reasons += (reasons.empty() ? "" : ", ") + reason + " " + std::to_string(count);
    }
    spdlog::info(
        "webhook of {} alerts: {} started, {} sent on, {} resolved, {} dropped ({}); the "
        "first dropped: {} fingerprint={}: {}",
        message.alerts.size(), answer.started.size(), answer.dispatched.size(), answer.resolved,
        answer.dropped.size(), reasons, answer.dropped[0].alertname, answer.dropped[0].fingerprint,
        answer.dropped[0].detail);
  }
  return answer;
}

void AlertReceiver::malformed() {
  std::lock_guard lock(mutex_);
  ++malformed_;
}

collectors::MetricSet AlertReceiver::metrics() const {
  collectors::MetricSet out;
  std::vector<std::vector<std::uint64_t>> runs;
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
              "Firing alerts that started no probe and were not sent on, by reason (no_rule, "
              "other_instance, no_module, no_peer, no_peer_list, no_host, not_a_host, repeat, "
              "in_flight_limit, "
              "dispatch_queue_full, or the scheduler's refusal: queue_full, "
              "target_not_allowed, unknown_module, bad_target, ...).",
              MetricType::Counter, {{"reason", reason}}, static_cast<double>(count));
    }
    out.add("ibprobe_alert_probes_sent_on_total",
            "Firing alerts about another host queued to be sent on to that host's exporter.",
            MetricType::Counter, {}, static_cast<double>(dispatched_));
    for (const auto& [result, count] : dispatches_) {
      out.add("ibprobe_alert_sent_on_requests_total",
              "Alerts sent on to another exporter's receiver, by result: sent, refused (not 2xx), "
              "failed (not delivered).",
              MetricType::Counter, {{"result", result}}, static_cast<double>(count));
    }
    for (const auto& [result, count] : pushed_) {
      out.add("ibprobe_alert_verdicts_pushed_total",
              "Verdicts of alert-started runs pushed to Alertmanager (--alerts.alertmanager-url), "
              "by result: sent, refused (not 2xx), failed (not delivered).",
              MetricType::Counter, {{"result", result}}, static_cast<double>(count));
    }
    for (const auto& t : triggered_) runs.push_back(t.run_ids);
  }
  for (const auto& ids : runs) {
    std::optional<ProbeRun> shown;
    for (auto id = ids.rbegin(); id != ids.rend(); ++id) {
      auto run = service_.get(*id, std::chrono::milliseconds(0));
      if (!run || !run->trigger) continue;
      if (!shown) shown = run;
      if (run->done()) {
        shown = std::move(run);
        break;
      }
    }
    if (shown) add_verdict(out, *shown);
  }
  return out;
}

}  // namespace ibprobe::exporter

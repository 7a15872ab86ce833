// The alert receiver: Alertmanager's webhook (POST /api/v1/alerts) starts the runbook's probe
// for each firing alert, so the link has been measured by the time someone reads the page.
// Which probe against whom comes from the configuration's alert rules; a storm of webhooks is
// bounded (one run per alert per repeat window, a cap on the receiver's runs in flight, the
// scheduler's own queue and port gate), and what is not run is counted by reason. The verdict of
// the last run per alert is on /metrics, labelled with the alert's labels.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <expected>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

#include "alert_webhook.h"
#include "http_post.h"
#include "ibprobe/collectors.h"
#include "ibprobe/mesh_plan.h"
#include "probe_service.h"
#include "self_names.h"

namespace ibprobe::exporter {

// The verdict of a finished alert-started run as an alert for Alertmanager's v2 API
// (POST /api/v2/alerts takes a list of these): alertname IbprobeProbeVerdict with the original
// alert's labels, verdict_for (its alertname) and verdict (healthy, errors_moved, failed), the
// verdict in words as its summary, and an end `lasts` after `now`, so it resolves by itself.
nlohmann::json verdict_alert(const ProbeRun& run, std::chrono::system_clock::time_point now,
                             std::chrono::seconds lasts);

// The hosts a rule's peer_choice picks among, each with the leaf it hangs off, and where the list
// came from (for the reasons given when it holds no usable peer).
struct PeerList {
  std::vector<mesh::MeshPeer> peers;
  std::string source;
  // The target naming this host in the list (the mesh's `self`); empty: the peer whose host is
  // the receiver's own.
  std::string self = {};
};
using PeerDirectory = std::function<std::expected<PeerList, std::string>()>;

// The host `choice` picks for a probe run from `from_host` (as the list's targets name hosts; the
// list's `self` when it names one): among the hosts behind the same leaf,
// or behind another one, the same for one fingerprint each time (a repeated alert measures the
// same pair) and spread over the candidates across alerts. Or why there is none, in words.
std::expected<std::string, std::string> choose_peer(const PeerList& list,
                                                    std::string_view from_host, PeerChoice choice,
                                                    std::string_view fingerprint);

class AlertReceiver {
 public:
  using Clock = std::chrono::steady_clock;
  // The header an alert sent on from another exporter's receiver carries (its host name): such
  // an alert came to the address its instance names, so it is answered here, never sent
  // further. Lower case, as the HTTP server hands header names over (they are
  // case-insensitive).
  static constexpr std::string_view kSentOnHeader = "x-ibprobe-sent-on-by";

  // `self_names`: where the names this exporter goes by come from (SelfNames). `alertmanager`:
  // where each verdict is pushed (its v2 API), by a thread of the receiver's own; unset: the
  // verdicts stay on /metrics and in the run history.
  AlertReceiver(ProbeService& service, SelfNames::Sources self_names,
                std::optional<HttpUrl> alertmanager = std::nullopt,
                std::function<Clock::time_point()> now = Clock::now);
  ~AlertReceiver();
  AlertReceiver(const AlertReceiver&) = delete;
  AlertReceiver& operator=(const AlertReceiver&) = delete;

  struct Started {
    std::string alertname;
    std::string fingerprint;
    std::uint64_t run_id = 0;
  };
  struct Dropped {
    std::string alertname;
    std::string fingerprint;
    std::string reason;  // a stable word: no_rule, no_peer, repeat, other_instance, ...
    std::string detail;  // in words, with the values involved
  };
  struct Dispatched {
    std::string alertname;
    std::string fingerprint;
    std::string exporter;  // HOST:PORT it is sent on to
  };
  struct Answer {
    std::vector<Started> started;
    std::vector<Dispatched> dispatched;
    std::vector<Dropped> dropped;
    std::size_t resolved = 0;  // resolved alerts start nothing
  };

  // Where rules with a peer_choice find their peer when the configuration names no
  // alerts.peers_file (the running mesh's list), and the port the peers' responders listen on.
  // Set before the first receive().
  void set_peer_directory(PeerDirectory directory, std::string responder_port);
  // The HTTP server's listen host and bound port (SelfNames::set_listen).
  void set_listen(std::string host, std::uint16_t port) {
    self_names_.set_listen(std::move(host), port);
  }

  // `sent_on`: the message came from another exporter's receiver (it runs here, never sent
  // further).
  Answer receive(const WebhookMessage& message, bool sent_on = false);
  // A message that did not parse, counted.
  void malformed();

  // ibprobe_alert_* families: notifications by status, runs started, drops by reason, and the
  // last triggered run per alert with its verdict.
  collectors::MetricSet metrics() const;

 private:
  // The runs one alert started, newest last. /metrics shows the newest that has finished (the
  // newest while none has): a repeated alert starts its next run while the last verdict still
  // stands, and a verdict that vanished for the length of every run would leave the page and
  // its panels blank whenever they are read during one.
  struct Triggered {
    std::string key;  // alertname and fingerprint
    std::vector<std::uint64_t> run_ids;
  };
  // Runs kept per alert: the receiver's in-flight bound and the repeat window keep fewer
  // unfinished than this behind a finished one.
  static constexpr std::size_t kRunsPerAlert = 4;

  // A run id, the exporter the alert is sent on to, or why neither. `rule`: the first that
  // matches the alert (null: none); `peers`: read when that rule needs a peer list.
  std::expected<std::variant<std::uint64_t, Dispatched>, Dropped> answer(
      const WebhookAlert& alert, const AlertRule* rule, const AlertResponse& response,
      const std::optional<std::expected<PeerList, std::string>>& peers, bool sent_on);
  // The peer list of alerts.peers_file, else of the directory; read once per message, outside
  // the lock, and only when an alert's rule needs it.
  std::expected<PeerList, std::string> read_peer_list(const AlertResponse& response) const;
  std::size_t in_flight_locked() const;
  // Sends the alerts queued for other exporters on, and pushes the verdict of every awaited run
  // that has finished, until `stop`.
  void send(std::stop_token stop);

  ProbeService& service_;
  // Sent with every alert sent on (kSentOnHeader): this exporter's host name.
  std::string host_name_;
  SelfNames self_names_;
  PeerDirectory peer_directory_;
  std::string responder_port_ = std::to_string(kDefaultResponderPort);
  std::function<Clock::time_point()> now_;

  mutable std::mutex mutex_;
  // By fingerprint, each its own window: an alert this exporter sent on and that came back to it
  // (an instance it did not know itself by) still runs here.
  std::map<std::string, Clock::time_point> last_started_;
  std::map<std::string, Clock::time_point> last_sent_on_;
  mutable std::vector<std::uint64_t> in_flight_;        // run ids, pruned when done
  std::deque<Triggered> triggered_;                     // newest last, one per alert
  std::map<std::string, std::uint64_t> dropped_;        // by reason
  std::map<std::string, std::uint64_t> notifications_;  // by status
  std::uint64_t started_ = 0;
  std::uint64_t dispatched_ = 0;
  std::uint64_t malformed_ = 0;
  std::optional<HttpUrl> alertmanager_;
  std::vector<std::uint64_t> awaiting_verdict_;  // run ids whose verdict is not pushed yet
  std::map<std::string, std::uint64_t> pushed_;  // by result: sent, refused, failed
  struct Outgoing {
    HttpUrl url;
    std::string body;
    std::string authorization;
    TlsClientOptions tls = {};
  };
  // Alerts waiting to be sent on; past this many, more are dropped (dispatch_queue_full).
  static constexpr std::size_t kMaxQueuedDispatches = 64;
  std::deque<Outgoing> to_dispatch_;
  std::map<std::string, std::uint64_t> dispatches_;  // by result: sent, refused, failed
  std::condition_variable_any work_;
  // Last: it stops and joins first, while everything it uses is still there.
  std::jthread sender_;
};

}  // namespace ibprobe::exporter

// The alert receiver: Alertmanager's webhook (POST /api/v1/alerts) starts the runbook's probe
// for each firing alert, so the link has been measured by the time someone reads the page.
// Which probe against whom comes from the configuration's alert rules; a storm of webhooks is
// bounded (one run per alert per repeat window, a cap on the receiver's runs in flight, the
// scheduler's own queue and port gate), and what is not run is counted by reason. The verdict of
// the last run per alert is on /metrics, labelled with the alert's labels.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "alert_webhook.h"
#include "ibprobe/collectors.h"
#include "probe_service.h"

namespace ibprobe::exporter {

class AlertReceiver {
 public:
  using Clock = std::chrono::steady_clock;

  // `host_name`: this exporter's host, the `instance` an alert must name when the configuration
  // sets none.
  AlertReceiver(ProbeService& service, std::string host_name,
                std::function<Clock::time_point()> now = Clock::now);

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
  struct Answer {
    std::vector<Started> started;
    std::vector<Dropped> dropped;
    std::size_t resolved = 0;  // resolved alerts start nothing
  };

  Answer receive(const WebhookMessage& message);
  // A message that did not parse, counted.
  void malformed();

  // ibprobe_alert_* families: notifications by status, runs started, drops by reason, and the
  // last triggered run per alert with its verdict.
  collectors::MetricSet metrics() const;

 private:
  struct Triggered {
    std::string key;  // alertname and fingerprint
    std::uint64_t run_id = 0;
  };

  std::expected<std::uint64_t, Dropped> answer(const WebhookAlert& alert,
                                               const AlertResponse& response);
  std::size_t in_flight_locked() const;

  ProbeService& service_;
  std::string host_name_;
  std::function<Clock::time_point()> now_;

  mutable std::mutex mutex_;
  std::map<std::string, Clock::time_point> last_started_;  // by fingerprint
  mutable std::vector<std::uint64_t> in_flight_;           // run ids, pruned when done
  std::deque<Triggered> triggered_;                        // newest last, one per alert
  std::map<std::string, std::uint64_t> dropped_;           // by reason
  std::map<std::string, std::uint64_t> notifications_;     // by status
  std::uint64_t started_ = 0;
  std::uint64_t malformed_ = 0;
};

}  // namespace ibprobe::exporter

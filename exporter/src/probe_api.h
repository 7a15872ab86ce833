// The HTTP face of the probe scheduler: /probe (blackbox_exporter's contract), the async API for
// runbooks under /api/v1/probes, and /-/reload.
#pragma once

#include <atomic>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <semaphore>
#include <string>

#include "alert_receiver.h"
#include "ibprobe/exporter.h"
#include "probe_service.h"

namespace ibprobe::exporter {

// A run as the async API shows it.
nlohmann::json run_to_json(const ProbeRun& run);

// Requests that wait for a probe (/probe, ?wait=) each hold an HTTP worker while they wait. At
// most `max_waiting` of them wait at once, on workers the server adds beyond --web.threads, so
// /metrics and /-/* always find a free one; a request beyond the bound is answered 503 with
// Retry-After at once, and a waiting client that disconnects gives its slot back at once.
class ProbeApi {
 public:
  static constexpr std::size_t kDefaultMaxWaiting = 64;

  // `self_names`: where the alert receiver learns the names this exporter goes by (the
  // system's, but in tests). `alertmanager`: where it pushes its verdicts (unset: nowhere).
  explicit ProbeApi(ProbeService& service, std::size_t max_waiting = kDefaultMaxWaiting,
                    SelfNames::Sources self_names = SelfNames::system(),
                    std::optional<HttpUrl> alertmanager = std::nullopt)
      : service_(service),
        waiting_slots_(static_cast<std::ptrdiff_t>(max_waiting)),
        alert_receiver_(service, std::move(self_names), std::move(alertmanager)) {}

  // The HTTP server's listen host (empty: every address) and bound port: an alert whose
  // instance names them is this exporter's.
  void set_listen(std::string host, std::uint16_t port) {
    alert_receiver_.set_listen(std::move(host), port);
  }

  // Where the alert receiver's peer_choice rules find their peers (AlertReceiver's). Before the
  // server starts.
  void set_peer_directory(PeerDirectory directory, std::string responder_port) {
    alert_receiver_.set_peer_directory(std::move(directory), std::move(responder_port));
  }

  // GET /probe?target=HOST:PORT&module=NAME[&debug=true]
  HttpResponse probe(const HttpRequest& request) const;
  // POST /api/v1/probes {"target":..., "module":...} -> 202 {"id":...}
  HttpResponse start(const HttpRequest& request) const;
  // GET /api/v1/probes[?limit=N]
  HttpResponse list(const HttpRequest& request) const;
  // GET /probes: the recent runs as an HTML page.
  HttpResponse runs_page() const;
  // GET /api/v1/probes/ID[?wait=DURATION]
  HttpResponse get(const HttpRequest& request, std::string_view id) const;
  // POST /-/reload
  HttpResponse reload() const;
  // POST /api/v1/alerts: Alertmanager's webhook (version 4). 200 with what was started and what
  // was dropped and why; 400 for a message that is not one.
  HttpResponse alerts(const HttpRequest& request) const;

  // Every probe family for /metrics: the last result per (target, module) and the run counts.
  collectors::MetricSet metrics() const;
  // The alert receiver's families (AlertReceiver::metrics).
  collectors::MetricSet alert_metrics() const;
  // Requests waiting right now.
  std::size_t waiting() const { return waiting_; }

 private:
  // One of the waiting slots, for as long as it lives; empty when none is free.
  class WaitingSlot {
   public:
    explicit WaitingSlot(const ProbeApi& api)
        : api_(api.waiting_slots_.try_acquire() ? &api : nullptr) {
      if (api_) ++api_->waiting_;
    }
    ~WaitingSlot() {
      if (!api_) return;
      --api_->waiting_;
      api_->waiting_slots_.release();
    }
    WaitingSlot(const WaitingSlot&) = delete;
    WaitingSlot& operator=(const WaitingSlot&) = delete;
    explicit operator bool() const { return api_ != nullptr; }

   private:
    const ProbeApi* api_;
  };

  ProbeService& service_;
  mutable std::counting_semaphore<> waiting_slots_;
  mutable std::atomic<std::size_t> waiting_ = 0;
  // Synchronized within; the HTTP handlers are const.
  mutable AlertReceiver alert_receiver_;
};

}  // namespace ibprobe::exporter

// The HTTP face of the probe scheduler: /probe (blackbox_exporter's contract), the async API for
// runbooks under /api/v1/probes, and /-/reload.
#pragma once

#include <nlohmann/json.hpp>

#include "ibprobe/exporter.h"
#include "probe_service.h"

namespace ibprobe::exporter {

// A run as the async API shows it.
nlohmann::json run_to_json(const ProbeRun& run);

class ProbeApi {
 public:
  explicit ProbeApi(ProbeService& service) : service_(service) {}

  // GET /probe?target=HOST:PORT&module=NAME[&debug=true]
  HttpResponse probe(const HttpRequest& request) const;
  // POST /api/v1/probes {"target":..., "module":...} -> 202 {"id":...}
  HttpResponse start(const HttpRequest& request) const;
  // GET /api/v1/probes[?limit=N]
  HttpResponse list(const HttpRequest& request) const;
  // GET /api/v1/probes/ID[?wait=DURATION]
  HttpResponse get(const HttpRequest& request, std::string_view id) const;
  // POST /-/reload
  HttpResponse reload() const;

  // Every probe family for /metrics: the last result per (target, module) and the run counts.
  std::vector<prometheus::MetricFamily> metrics() const;

 private:
  ProbeService& service_;
};

}  // namespace ibprobe::exporter

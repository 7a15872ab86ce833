// The fabric endpoints, multi-target as snmp_exporter serves switches: /fabric/sd lists every
// discovered switch as Prometheus HTTP service discovery targets, /fabric?target=GUID answers
// one switch's port series, so Prometheus schedules the reads and shards them (hashmod) over
// several exporters. POST /fabric/discover rediscovers now.
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "ibprobe/exporter.h"
#include "ibprobe/fabric.h"
#include "probe_request.h"

namespace ibprobe::exporter {
namespace {

class LoggedErrors final : public collectors::ErrorSink {
 public:
  void record(collectors::ReadError reason, const std::filesystem::path& path) override {
    spdlog::debug("fabric read dropped input path={} reason={}", path.string(),
                  collectors::to_string(reason));
  }
};

HttpResponse serialize(const collectors::MetricSet& metrics) {
  HttpResponse response;
  response.content_type = "text/plain; version=0.0.4; charset=utf-8";
  metrics.append_text(response.body);
  return response;
}

}  // namespace

HttpResponse Routes::fabric_route(const HttpRequest& request) const {
  if (!fabric_) {
    return HttpResponse::text(503,
                              "fabric discovery is off on this exporter (--fabric.enabled or "
                              "--collector.fabric)\n");
  }
  if (request.path == "/fabric/discover") {
    if (request.method != "POST") {
      auto response = HttpResponse::text(
          405, "method " + request.method + " not allowed on " + request.path + "\n");
      response.headers.emplace_back("Allow", "POST");
      return response;
    }
    return fabric_->rediscover()
               ? HttpResponse::text(200, "discovered\n")
               : HttpResponse::text(500, "discovery failed; the previous model is served\n");
  }
  if (request.path == "/fabric/sd") {
    // Not an empty list: Prometheus would drop every switch target it has. A failed SD request
    // keeps them until a later refresh succeeds.
    const auto switches = fabric_->switches();
    if (!switches) {
      return HttpResponse::text(503,
                                "no fabric model yet: the first discovery has not succeeded\n");
    }
    nlohmann::json groups = nlohmann::json::array();
    for (const auto& sw : *switches) {
      groups.push_back({{"targets", {sw.guid}},
                        {"labels",
                         {{"node_description", sw.description},
                          {"__meta_ibprobe_switch_lid", std::to_string(sw.lid)},
                          {"__meta_ibprobe_switch_ports", std::to_string(sw.ports)}}}});
    }
    HttpResponse response;
    response.content_type = "application/json";
    response.body = groups.dump() + "\n";
    return response;
  }
  const auto parsed = parse_query(request.query);
  if (!parsed) return HttpResponse::text(400, parsed.error() + "\n");
  const auto& params = parsed.value();
  for (const auto& [name, value] : params) {
    if (name != "target")
      return HttpResponse::text(400, "unknown parameter '" + name + "' (only target)\n");
  }
  const auto target = params.find("target");
  if (target == params.end()) {
    return HttpResponse::text(
        400, "missing target: /fabric?target=SWITCH_GUID (listed by /fabric/sd)\n");
  }
  const auto guid = fabric::parse_guid(target->second);
  if (!guid) {
    return HttpResponse::text(400,
                              "target '" + target->second +
                                  "' is not a GUID (0x0002c90300100001 or 0002:c903:0010:0001)\n");
  }
  std::chrono::milliseconds budget{0};
  const auto scrape = scrape_budget_seconds(request.headers);
  if (!scrape) return HttpResponse::text(400, scrape.error() + "\n");
  if (*scrape) {
    budget = std::chrono::milliseconds(static_cast<long>(std::max(**scrape, 0.1) * 1000));
  }
  collectors::MetricSet metrics;
  LoggedErrors errors;
  switch (fabric_->collect_switch(*guid, budget, metrics, errors)) {
    case fabric::Fabric::Lookup::kNoModel:
      return HttpResponse::text(503,
                                "no fabric model yet: the first discovery has not succeeded\n");
    case fabric::Fabric::Lookup::kUnknownSwitch:
      return HttpResponse::text(404, "no switch " + target->second + " in the fabric model\n");
    case fabric::Fabric::Lookup::kFound:
      break;
  }
  return serialize(metrics);
}

}  // namespace ibprobe::exporter

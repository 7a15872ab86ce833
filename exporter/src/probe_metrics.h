// Probe runs as Prometheus metric families: one run for a /probe response, and the last run per
// (target, module) plus the run counts for /metrics.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ibprobe/collectors.h"
#include "probe_service.h"

namespace ibprobe::exporter {

// The families of one run. /probe answers with them as they are; /metrics passes every last
// result with its target and module as labels, so the same families carry one series per pair.
collectors::MetricSet probe_run_metrics(const ProbeRun& run, bool with_target_labels);

// Last results of every (target, module), merged family by family, with the time each ran and
// ibprobe_probes_total{module,result}.
collectors::MetricSet last_result_metrics(
    const std::vector<ProbeRun>& runs,
    const std::map<std::pair<std::string, std::string>, std::uint64_t>& totals);

}  // namespace ibprobe::exporter

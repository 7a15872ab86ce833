// The recent probe runs as a page a person reads (GET /probes), as blackbox_exporter's "Recent
// probes": each run's trigger, module, peer, state, verdict, failure reason and duration, its
// full record (log figures, counter deltas) one click away in the API.
#pragma once

#include <string>
#include <vector>

#include "probe_run.h"

namespace ibprobe::exporter {

// Newest first, as given. Every text from a run (targets, alert labels, failure messages) is
// escaped: alert labels come from a webhook anyone allowed to post may write.
std::string render_runs_page(const std::vector<ProbeRun>& runs);

}  // namespace ibprobe::exporter

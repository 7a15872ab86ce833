#include "runs_page.h"

#include "human_text.h"
#include "ibprobe/probes.h"

namespace ibprobe::exporter {
namespace {

std::string escaped(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string cell(const std::string& css_class, const std::string& html) {
  return "<td class=\"" + css_class + "\">" + html + "</td>";
}

// What the run found, in words: its figures and the diagnosis, or why it failed.
std::string verdict(const ProbeRun& run) {
  if (!run.done()) return "";
  if (!run.succeeded()) return "failed: " + escaped(run.failure_reason);
  std::string out = "succeeded";
  if (const auto& outcome = run.outcome) {
    if (outcome->bandwidth) {
      out += ", BW " + fixed_point(outcome->bandwidth->bytes_per_second / 1e6, 1) + " MB/s";
    }
    if (outcome->latency) {
      out += ", t_typical " + fixed_point(outcome->latency->typical_ns / 1e3, 2) + " us";
    }
    out += ", " + escaped(std::string(probes::to_string(outcome->link.diagnosis)));
    if (!outcome->link.moved_error_counters.empty()) {
      out += "; error counters moved:";
      for (const auto& counter : outcome->link.moved_error_counters) {
        out += " " + escaped(counter);
      }
    }
  }
  return out;
}

}  // namespace

std::string render_runs_page(const std::vector<ProbeRun>& runs) {
  std::string rows;
  for (const auto& run : runs) {
    const std::string id = std::to_string(run.id);
    std::string trigger = "&mdash;";
    if (run.trigger) {
      trigger = escaped(run.trigger->alertname) + " <span class=\"fingerprint\">" +
                escaped(run.trigger->fingerprint) + "</span>";
    }
    rows += "<tr id=\"run-" + id + "\" class=\"" + std::string(to_string(run.state)) + "\">" +
            cell("id", "<a href=\"/api/v1/probes/" + id + "\">" + id + "</a>") +
            cell("submitted", utc_text(run.submitted, "%Y-%m-%d %H:%M:%S")) +
            cell("trigger", trigger) + cell("module", escaped(run.module)) +
            cell("target", escaped(run.target)) + cell("state", std::string(to_string(run.state))) +
            cell("verdict", verdict(run)) + cell("failure", escaped(run.failure)) +
            cell("duration", run.done() ? fixed_point(run.duration_seconds, 3) + " s" : "") +
            "</tr>\n";
  }
  return R"(<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>ibprobe: recent probe runs</title>
<style>
body { font-family: sans-serif; }
table { border-collapse: collapse; }
td, th { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: left; vertical-align: top; }
tr.failed td.verdict { color: #b00; }
.fingerprint { color: #777; font-size: smaller; }
</style></head>
<body>
<h1>Recent probe runs</h1>
<p>Newest first: queued, running and finished runs (the last successful and, kept apart, the last
failed ones). Each id links to the run's full record: figures, checks and counter deltas.
<a href="/">Back</a></p>
<table id="runs">
<thead><tr><th>Run</th><th>Submitted (UTC)</th><th>Trigger</th><th>Module</th><th>Target</th>
<th>State</th><th>Verdict</th><th>Failure</th><th>Duration</th></tr></thead>
<tbody>
)" + rows +
         R"(</tbody>
</table>
</body></html>
)";
}

}  // namespace ibprobe::exporter

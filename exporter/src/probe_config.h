// The probe configuration file (--config.file): probe modules in the manner of blackbox_exporter's
// blackbox.yml, the targets that may be probed, and the scheduler's bounds.
#pragma once

#include <chrono>
#include <cstddef>
#include <expected>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "http_post.h"
#include "ibprobe/mesh_config.h"
#include "ibprobe/probes.h"
#include "ibprobe/sweep.h"
#include "ibprobe/verify_plan.h"
#include "target_allowlist.h"

namespace ibprobe::exporter {

struct ProbeModule {
  // Everything both sides must agree on; spec.timeout_seconds caps a run of this module, also
  // when Prometheus allows a longer scrape.
  probes::ProbeSpec spec;
  // "LID:PORT" fabric ports whose counters are read around every run of this module.
  std::vector<std::string> fabric_ports;
  // A sweep module: one run per value of one variable, `spec` fixing all the rest (sweep->base
  // equals spec). Unset: one run of `spec`.
  std::optional<probes::SweepSpec> sweep = std::nullopt;
  // kind: verify - the verification suite's cases instead of a probe; spec.timeout_seconds bounds
  // each case.
  std::vector<probes::verify::Case> verify_cases = {};
  probes::verify::Options verify_options = {};
};

// A peer picked from the peer list (AlertResponse::peers_file, else the mesh's) by where it hangs
// off relative to the host that runs the probe: behind the same leaf switch (the traffic crosses
// that host's cable and the peer's, nothing else), or behind another one (it crosses the leaf's
// uplinks too).
enum class PeerChoice { kNone, kSameLeaf, kOtherLeaf };
std::string_view to_string(PeerChoice choice);

// How the alert receiver (POST /api/v1/alerts) answers a firing alert with a probe: the first
// rule whose alertname and label matchers hold names the module and the peer.
struct AlertRule {
  std::string alertname = {};
  std::map<std::string, std::string> match = {};  // label = value, every one must hold
  // The module: this name, or the value of the alert's label `module_label` (probe alerts carry
  // the module that failed).
  std::string module = {};
  std::string module_label = {};
  // The peer (HOST or HOST:PORT): this target, or the value of the alert's label `peer_label`
  // (probe alerts carry `target`, mesh alerts `peer_instance`), or a host of the peer list picked
  // by `peer_choice` (the host-port alerts name no peer).
  std::string peer = {};
  std::string peer_label = {};
  PeerChoice peer_choice = PeerChoice::kNone;
  // The host that runs the probe: the first word of this label's value instead of the alert's
  // `instance`. A switch-port alert's `remote_description` ("node-0113 mlx5_0", as Linux sets a
  // CA's node description) names the host at the cable's far end, whose traffic crosses it.
  std::string run_from_label = {};
};

struct AlertResponse {
  // First match wins. Unset in the file: default_alert_rules(), one per shipped alert whose
  // runbook probe names its peer in the alert's labels.
  std::vector<AlertRule> rules;
  // One run per alert (its fingerprint) per window: Alertmanager repeats a firing alert every
  // repeat_interval and on every group change.
  std::chrono::seconds repeat{std::chrono::hours(1)};
  // Runs the receiver has queued or running at once; more alerts are dropped, counted.
  std::size_t max_in_flight = 2;
  // One more name of this exporter, beside those it knows by itself (SelfNames: its listen
  // address, interface addresses, host name and FQDN): "HOST" names every port of that host,
  // "HOST:PORT" this exporter alone. For an `instance` relabelled to a name the host does not
  // know itself by. An alert about another exporter is not this one's to probe from.
  std::string instance = {};
  // An alert about another exporter is sent on to it (POST /api/v1/alerts at the alert's
  // instance), which answers it by its own rules: at the port the instance names, or this port
  // where it names none; 0: dropped instead (other_instance). An alert that arrived sent on is
  // answered where it arrived and never sent further.
  std::uint16_t dispatch_port = 9470;
  // false: always dispatch_port, for sites whose relabelled `instance` carries a port that is
  // not the exporter's.
  bool dispatch_to_instance_port = true;
  // The Authorization header value for those requests ("Basic ..." from dispatch_basic_auth),
  // for exporters whose --web.config.file asks for basic auth; empty: none.
  std::string dispatch_authorization = {};
  // Set (dispatch_tls in the file): those requests go over HTTPS, the exporters' certificates
  // checked as it says, for exporters whose --web.config.file serves TLS.
  std::optional<TlsClientOptions> dispatch_tls = std::nullopt;
  // The peer list `peer_choice` picks from: a file_sd file with a `tor` label per group (the one
  // Prometheus scrapes the exporters with), read at each webhook; empty: the running mesh's peer
  // list (which may come from the fabric model, mesh.peers_fabric).
  std::string peers_file = {};
};

// The shipped alerts (dashboards/prometheus/*.rules.yml) whose runbook runs a probe against a
// peer the alert names: the probe alerts (module and target from their labels) and
// IbprobeMeshPathLoss (send_lat to peer_instance).
std::vector<AlertRule> default_alert_rules();

struct ProbeConfig {
  std::map<std::string, ProbeModule, std::less<>> modules;
  // CIDRs and host names (exact or "*.suffix") a probe may target; empty: any target.
  std::vector<std::string> allowed_targets;
  std::shared_ptr<const TargetAllowlist> allowlist;  // built from allowed_targets; null: any
  // Requests waiting behind the running probe; more are refused with 429.
  std::size_t queue_length = 4;
  // Finished runs kept for the async API, oldest dropped first.
  std::size_t history_length = 64;
  // Bounds of every module, and of what a peer's responder is asked to do.
  probes::Limits limits;
  mesh::MeshConfig mesh;
  AlertResponse alerts = {default_alert_rules()};
};

// The six modules a fresh install has: write_bw, write_lat, read_bw, read_lat, send_bw, send_lat,
// with perftest's defaults for each (probes::default_spec).
ProbeConfig default_probe_config();

// Parses the YAML text of a configuration file. On error, the text says where (line and column
// of the offending node) and why; nothing of a rejected file is used.
std::expected<ProbeConfig, std::string> parse_probe_config(std::string_view text);

// Reads and parses a file; errors name the file.
std::expected<ProbeConfig, std::string> load_probe_config(const std::string& path);

}  // namespace ibprobe::exporter

#!/bin/bash
#
# Site acceptance, built from the shipped files: the four-host fabric lab (A and B on leaf1, C and
# D on leaf2, 10.99.0.1 to .4), an exporter on each host's own address, and inside VM D a real
# Prometheus and a real Alertmanager, so that both reach the exporters as a site's do, by their
# lab addresses:
#   - Prometheus runs deploy/config/prometheus.yml with the addresses substituted: the ibprobe job
#     reads the site's file_sd file (the one the exporters take as alerts.peers_file and
#     mesh.peers_file, with a `tor` label per leaf) instead of a static list, the probe-mesh jobs
#     probe D from C, the fabric jobs are left out (an InfiniBand fabric's); the scrape intervals
#     are seconds, and the rules are dashboards/prometheus/ as shipped but for their windows and
#     `for` (run_queries.py adapt-rules: 2m and 4s, evaluated every second). Alertmanager runs
#     deploy/config/alertmanager.yml with its receivers' URLs substituted (A's exporter for
#     ibprobe's alerts, over HTTP without the shipped auth and TLS; the people's at a port where
#     nothing listens). The exporters run deploy/config/ibprobe.yml with lab-sized modules, the
#     mesh on and the alert receiver's default rules (write_exporter_configs).
#   - Two cases, each a fault from scratch: by name (the file_sd file lists the hosts by host
#     name, and the shipped relabelling makes `instance` the name without port) and by address
#     (it lists 10.99.0.x:PORT and `instance` stays as Prometheus makes it, IP:port, with B's
#     exporter on a port other than 9470).
#   - The fault: 2 % loss on B's link (netem in VM B) while B writes to A. IbprobeRetransmissions
#     fires for B, its runbook's command naming B's exporter; Alertmanager sends it to A's
#     exporter; A is not the host the alert is about, so it sends it on to B's exporter, at the
#     port the instance names (9470 where it names none); B runs the runbook's write_bw to the
#     other host of its leaf; the verdict reaches Prometheus (ibprobe_alert_probe_* of B, naming
#     the retransmission counters that moved) and Alertmanager (IbprobeProbeVerdict pushed by B,
#     --alerts.alertmanager-url). The seconds from the fault to the alert firing, to the verdict
#     in Prometheus and in Alertmanager are printed.
#   - In each case, with the loss still on, every panel and variable of every shipped Grafana
#     dashboard returns data from that Prometheus (host and prober: All; device rxe0, port 1),
#     and every rule loads and evaluates, except the panels of NEEDS_HARDWARE below, each with
#     the reason (one whose every query returns data fails, so that the list stays true), and of
#     OTHER_FAULT, which show faults this test does not cause.
# Every wait is for the event asserted, polled with a deadline. The lab is handed on as found:
# netem removed, jobs ended, the hosts file unmounted.
#
# Environment: see lab-common.sh; IBPROBE_EXPORTER is the exporter binary.

set -euo pipefail
# shellcheck source=tests/lab/lab-common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lab-common.sh"
lab_exporter_test
HOSTS=(A B C D)
LOSS_PERCENT=${IBPROBE_LAB_LOSS_PERCENT:-2}
WINDOW=2m
HOLD=4s
# Prometheus and Alertmanager: in VM D, on these ports (forwarded to the host for the test).
MONITOR=D
PROM_PORT=9090
AM_PORT=9093
# The port of B's exporter in the by-address case: the alert names it, so A must send the alert
# there and not to the default 9470.
B_OTHER_PORT=9480

# Panels of the shipped dashboards that cannot have data in this lab, with the reason; the check
# fails if one of them returns data after all, so that the list stays true. rxe has no
# PortCounters (no counters/ directory: the data, packet, wait and error counters of an
# InfiniBand or RoCE HCA's PMA), virtio_net no transceiver, FEC or pause statistics, and the lab
# no InfiniBand fabric (tests/fabric checks the switch-ports dashboard on ibsim).
PORT_COUNTERS="rxe has no PortCounters (rdma_port_errors_total, rdma_port_data_*, rdma_port_packets_*, rdma_port_transmit_wait_ticks_total, rdma_port_pma_saturated: an HCA's PMA counters)"
NEEDS_HARDWARE=(
    "ibprobe-error-counters.json/Error increase per class=$PORT_COUNTERS"
    "ibprobe-error-counters.json/Error increase per port and counter=$PORT_COUNTERS"
    "ibprobe-error-counters.json/Ports with rising errors=$PORT_COUNTERS"
    "ibprobe-error-counters.json/Saturated counters=$PORT_COUNTERS"
    "ibprobe-error-counters.json/Link downed vs link error recovery=$PORT_COUNTERS"
    "ibprobe-error-counters.json/Symbol errors=$PORT_COUNTERS"
    "ibprobe-error-counters.json/Buffer overruns and VL15 drops=$PORT_COUNTERS"
    "ibprobe-error-counters.json/Receive errors and discards=$PORT_COUNTERS"
    "ibprobe-error-counters.json/Error counter values=$PORT_COUNTERS"
    "ibprobe-error-counters.json/variable counter=$PORT_COUNTERS"
    "ibprobe-error-counters.json/Congestion notifications (CNP) per second=rxe counts no congestion notifications (mlx5's np_cnp_sent, rp_cnp_handled: DCQCN)"
    "ibprobe-error-counters.json/Pause frames per priority=virtio_net has no per-priority pause statistics (a RoCE NIC's ethtool -S, ethtool collector)"
    "ibprobe-port-detail.json/Throughput=$PORT_COUNTERS"
    "ibprobe-port-detail.json/Packets/s=$PORT_COUNTERS"
    "ibprobe-port-detail.json/Transmit wait (ticks/s)=$PORT_COUNTERS"
    "ibprobe-port-detail.json/Error counters=$PORT_COUNTERS"
    "ibprobe-port-detail.json/Counter saturation=$PORT_COUNTERS"
    "ibprobe-port-detail.json/Pre-FEC BER=virtio_net has no FEC statistics (an InfiniBand port's PortExtendedSpeedsCounters, a NIC's FEC counters)"
    "ibprobe-port-detail.json/Transceiver receive power (dBm)=virtio_net has no transceiver module (link_health reads a module's EEPROM)"
    "ibprobe-port-detail.json/Transceiver temperature=virtio_net has no transceiver module (link_health reads a module's EEPROM)"
    "ibprobe-port-detail.json/Transceiver and FEC=virtio_net has no transceiver module and no FEC statistics"
    "ibprobe-probes.json/Link bytes/s during runs=$PORT_COUNTERS: a run's link bytes are its port's data-counter delta"
    "ibprobe-fabric-overview.json/Top talkers: transmitted bytes/s=$PORT_COUNTERS"
    "ibprobe-fabric-overview.json/Top talkers: received bytes/s=$PORT_COUNTERS"
    "ibprobe-fabric-overview.json/Fabric traffic=$PORT_COUNTERS"
    "ibprobe-fabric-overview.json/Top link utilization (5m)=$PORT_COUNTERS"
    "ibprobe-fabric-overview.json/Top transmit wait (ticks/s)=$PORT_COUNTERS"
    "ibprobe-switch-ports.json/*=switch ports of an InfiniBand fabric (--fabric.enabled); the lab is RoCE, tests/fabric checks this dashboard on ibsim"
)
# Panels that show a fault this test does not cause; they may be empty here.
OTHER_FAULT=(
    "ibprobe-mesh.json/Unreachable hosts=a host cut off from its watchers (lab.mesh_fabric cuts a cable and checks this panel)"
    "ibprobe-mesh.json/Lossy ToR pairs=loss between two ToRs (lab.mesh_fabric cuts the trunk and checks this panel)"
    "ibprobe-probes.json/Failed probes with reasons=only failed runs of the probe jobs; C's runs to D succeed (lab.prometheus_queries_two_host probes a closed port)"
    "ibprobe-probes.json/Alerts answered by a probe, and dropped/B=alerts a receiver dropped; every alert here is answered (unit and e2e tests drop them by reason)"
)

host_name_of() { echo "ibprobe-lab-${1,,}"; }

# The port each exporter listens on in CASE (name or address).
port_of() { # CASE HOST
    [[ $1 == address && $2 == B ]] && echo "$B_OTHER_PORT" || echo 9470
}

# How the site's file_sd file names HOST's exporter in CASE.
target_of() { # CASE HOST
    if [[ $1 == name ]]; then
        echo "$(host_name_of "$2"):9470"
    else
        echo "$(lab addr "$2"):$(port_of "$1" "$2")"
    fi
}

# The `instance` label Prometheus gives HOST in CASE: the shipped relabelling drops the port of a
# name; an address keeps it (the relabelling is left out in that case).
instance_of() { # CASE HOST
    if [[ $1 == name ]]; then host_name_of "$2"; else target_of "$1" "$2"; fi
}

ms_as_seconds() { printf '%d.%01d' $(($1 / 1000)) $(($1 % 1000 / 100)); }

prom() { echo "http://127.0.0.1:$(lab port "$MONITOR" "$PROM_PORT")"; }
am() { echo "http://127.0.0.1:$(lab port "$MONITOR" "$AM_PORT")"; }

# The VMs resolve the host names through the host's /etc/hosts (the root they share, read-only):
# each VM gets a copy with the lab's names mounted over it, as a site's DNS would serve them.
mount_hosts_file() {
    local host
    cp /etc/hosts "$work/hosts"
    for host in "${HOSTS[@]}"; do
        echo "$(lab addr "$host") $(host_name_of "$host")" >>"$work/hosts"
    done
    for host in "${HOSTS[@]}"; do
        lab exec --timeout 30 "$host" -- mount --bind "$work/hosts" /etc/hosts \
            || fail "cannot mount the lab's hosts file in VM $host"
    done
}

unmount_hosts_file() {
    local host
    for host in "${HOSTS[@]}"; do
        lab exec --timeout 30 "$host" -- bash -c 'if mountpoint -q /etc/hosts; then umount /etc/hosts; fi'
    done
}

# The site's file_sd file: every exporter as CASE names it, grouped by leaf.
write_file_sd() { # CASE
    cat >"$work/file_sd.json" <<JSON
[{"targets": ["$(target_of "$1" A)", "$(target_of "$1" B)"], "labels": {"tor": "leaf1", "gid_family": "ipv4"}},
 {"targets": ["$(target_of "$1" C)", "$(target_of "$1" D)"], "labels": {"tor": "leaf2", "gid_family": "ipv4"}}]
JSON
}

# Each exporter's --config.file: deploy/config/ibprobe.yml with the lab's subnet allowed, its
# modules made lab-sized, the mesh on over the site's file_sd file, and the alert receiver reading
# the same file (the shipped alert rules are the receiver's defaults). The mesh pings each peer 5
# times a second, not once: B's link then loses a ping within seconds, for the mesh panels.
# write_bw sends 4 KiB messages, four packets at rxe's MTU, so a lost packet costs a short
# go-back-N and a run stays within its retry budget at a few percent loss; 16 in flight, not
# perftest's 128: a run with 512 packets in flight under loss once had none of its 300 messages
# done after 20 s (rxe's overlapping resends: deploy/lab/README.md, Limits). Its ACK timeout is
# 268 ms (16): a lost last packet of a window waits that long, and at 1 s (the lab's usual 18)
# 300 messages under 2 % loss took longer than a minute; perftest's 67 ms would let a TCG VM that
# is only slow count as loss. Its timeout is 20 s: A sees sequence errors at its end of the lossy
# link, its own alert has it probe B while B probes A, and an initiator holds its port while it
# retries a busy responder, so the second of the two runs waits for the first one's timeout.
# `workload` is B's own traffic over the lossy link: about 50 packets lost of 2400, enough for
# the alert (more than 10). Not a run of seconds: 23,000 packets under loss once stalled B's lab
# NIC (QEMU took no more frames from its transmit ring; deploy/lab/README.md, Limits).
write_exporter_configs() { # CASE
    local host
    for host in "${HOSTS[@]}"; do
        python3 - "$LAB_TEST_ROOT/deploy/config/ibprobe.yml" "$work/ibprobe-$host.yml" \
            "$work/file_sd.json" "$(target_of "$1" "$host")" "$LAB_QP_TIMEOUT" <<'PY'
import sys, yaml
shipped, out, file_sd, self, qp_timeout = sys.argv[1:]
config = yaml.safe_load(open(shipped))
config["allowed_targets"] = ["10.99.0.0/24"]
config["modules"]["write_bw"] = {"kind": "write_bw", "message_size": 4096, "iterations": 300,
                                 "tx_depth": 16, "timeout": "20s", "rc": {"timeout": 16}}
config["modules"]["workload"] = {"kind": "write_bw", "message_size": 4096, "iterations": 600,
                                 "tx_depth": 16, "timeout": "30s", "rc": {"timeout": 16}}
config["modules"]["write_lat"] = {"kind": "write_lat", "iterations": 20, "timeout": "30s",
                                  "rc": {"timeout": int(qp_timeout)}}
config["modules"]["send_lat"] = {"kind": "send_lat", "iterations": 20, "timeout": "30s",
                                 "rc": {"timeout": int(qp_timeout)}}
config["mesh"] = {"enabled": True, "peers_file": file_sd, "self": self, "peer_rate": 5}
config["alerts"] = {"peers_file": file_sd, "repeat": "5m"}
yaml.safe_dump(config, open(out, "w"), sort_keys=False)
PY
    done
}

start_exporter() { # CASE HOST
    lab spawn --name "exporter-$1" "$2" -- "$EXPORTER" --web.listen-address=":$(port_of "$1" "$2")" \
        --config.file="$work/ibprobe-$2.yml" \
        --alerts.alertmanager-url="http://$(lab addr "$MONITOR"):$AM_PORT" >/dev/null \
        || fail "cannot start the exporter in VM $2"
}

# Alertmanager in VM D with the shipped routing: ibprobe's alerts to A's alert receiver (plain
# HTTP in the lab: the shipped basic auth and TLS are for the exporter's --web.config.file),
# people's pages to a port where nothing listens.
start_alertmanager() {
    lab_alertmanager_config "$work/alertmanager.yml" "http://$(lab addr A):9470/api/v1/alerts" \
        "http://127.0.0.1:9/alerts"
    lab spawn --name alertmanager "$MONITOR" -- prometheus-alertmanager \
        --config.file="$work/alertmanager.yml" --storage.path=/run/tmp/site-alertmanager \
        --web.listen-address=":$AM_PORT" --cluster.listen-address= >/dev/null \
        || fail "cannot start Alertmanager in VM $MONITOR"
}

# deploy/config/prometheus.yml for CASE: rule files and targets of this lab, intervals of seconds.
write_prometheus_config() { # CASE
    python3 - "$LAB_TEST_ROOT/deploy/config/prometheus.yml" "$work/prometheus-$1.yml" \
        "$work/file_sd.json" "$work/rules" "$1" "$(target_of "$1" C)" "$(lab addr D):9471" <<'PY'
import os, sys, yaml
shipped, out, file_sd, rules, case, prober, responder = sys.argv[1:]
config = yaml.safe_load(open(shipped))
config["global"] = {"scrape_interval": "2s", "evaluation_interval": "2s"}
config["rule_files"] = [os.path.join(rules, f) for f in config["rule_files"]]
jobs = []
for job in config["scrape_configs"]:
    name = job["job_name"]
    if name.startswith("ibprobe_fabric"):
        continue  # an InfiniBand fabric's switches: none in the lab
    if name == "ibprobe":
        job.update(scrape_interval="2s", scrape_timeout="2s")
        del job["static_configs"]
        job["file_sd_configs"] = [{"files": [file_sd], "refresh_interval": "5s"}]
        if case == "address":
            del job["relabel_configs"]  # instance: IP:port, as Prometheus makes it
    else:
        # The probe jobs: C probes D. One prober, so that its runs queue in its scheduler instead
        # of finding a responder busy with another prober's run.
        job["static_configs"] = [{"labels": {"__prober": prober}, "targets": [responder]}]
        job["scrape_interval"] = {"ibprobe_probe_write_lat": "10s"}.get(name, "20s")
        job["scrape_timeout"] = "9s" if name == "ibprobe_probe_write_lat" else "19s"
        if case == "address":
            job["relabel_configs"] = [r for r in job["relabel_configs"]
                                      if r.get("target_label") != "instance"] + [
                {"source_labels": ["__prober"], "target_label": "instance"}]
    jobs.append(job)
config["scrape_configs"] = jobs
yaml.safe_dump(config, open(out, "w"), sort_keys=False)
PY
    promtool check config "$work/prometheus-$1.yml" >"$work/promtool.log" 2>&1 \
        || fail "promtool check config: $(cat "$work/promtool.log")"
}

start_prometheus() { # CASE
    lab spawn --name "prometheus-$1" "$MONITOR" -- prometheus \
        --config.file="$work/prometheus-$1.yml" --storage.tsdb.path="/run/tmp/site-prometheus-$1" \
        --web.listen-address=":$PROM_PORT" >/dev/null \
        || fail "cannot start Prometheus in VM $MONITOR"
}

stop_prometheus() { # CASE
    lab kill "$MONITOR" "prometheus-$1" >/dev/null 2>&1 || true
    lab exec --timeout 30 "$MONITOR" -- rm -rf "/run/tmp/site-prometheus-$1" || true
}

# One PromQL query's result as lines of LABEL=VALUE... VALUE, for the given labels.
prom_rows() { # PROMQL LABEL...
    local query=$1
    shift
    curl -fsS --max-time 10 --get "$(prom)/api/v1/query" --data-urlencode "query=$query" \
        2>/dev/null | python3 -c '
import json, sys
labels = sys.argv[1:]
answer = sys.stdin.read()
if not answer:  # Prometheus is not answering yet: no rows, as the pollers expect
    sys.exit(0)
for r in json.loads(answer)["data"]["result"]:
    print(" ".join(f"{l}={r['"'"'metric'"'"'].get(l, '"'"''"'"')}" for l in labels), r["value"][1])' "$@"
}

# Waits for the event COMMAND finds (it prints something), asking every second, at most
# DEADLINE_SECS; prints what it found.
await() { # DEADLINE_SECS WHAT COMMAND...
    local limit=$1 what=$2 out
    shift 2
    local deadline=$((SECONDS + limit))
    until out=$("$@") && [[ -n $out ]]; do
        ((SECONDS < deadline)) || fail "$what not within $limit s; $(diagnose)"
        sleep 1
    done
    echo "$out"
}

# Prometheus scrapes every exporter (job ibprobe) and holds B's hw_counters.
scrapes_all() { # CASE
    local up
    up=$(prom_rows 'count(up{job="ibprobe"} == 1)')
    [[ ${up##* } == 4 ]] || return 0
    prom_rows "count(rdma_port_hw_stat_total{instance=\"$(instance_of "$1" B)\",class=\"retransmission\"})"
}

alert_firing() { # CASE
    prom_rows "ALERTS{alertname=\"IbprobeRetransmissions\",alertstate=\"firing\",instance=\"$(instance_of "$1" B)\"}" instance device
}

verdict_in_prometheus() { # CASE
    prom_rows "ibprobe_alert_probe_error_counter_delta{alertname=\"IbprobeRetransmissions\",instance=\"$(instance_of "$1" B)\",alert_instance=\"$(instance_of "$1" B)\",counter=~\"hw_counters/.*\"} > 0" counter side
}

verdict_in_alertmanager() { # CASE
    curl -fsS --max-time 10 --get "$(am)/api/v2/alerts" \
        --data-urlencode 'filter=alertname="IbprobeProbeVerdict"' \
        --data-urlencode 'filter=verdict_for="IbprobeRetransmissions"' \
        --data-urlencode "filter=instance=\"$(instance_of "$1" B)\"" 2>/dev/null | python3 -c '
import json, sys
for a in json.load(sys.stdin):
    if a["labels"].get("verdict") == "errors_moved":
        print(a["labels"]["verdict"], a["annotations"]["summary"])'
}

# The receivers' counters as Prometheus has them, for a failure's message.
receiver_state() {
    prom_rows '{__name__=~"ibprobe_alert_(notifications|probes_started|probes_dropped|probes_sent_on|sent_on_requests|verdicts_pushed)_total"} > 0' \
        instance __name__ reason result status | tr '\n' ';'
}

# What the alert loop did so far, for a failure's message: the alerts firing, the receivers'
# counters, B's alert-started runs.
diagnose() {
    echo "firing: $(prom_rows 'ALERTS{alertstate="firing"}' alertname instance | tr '\n' ';')"
    echo "receivers: $(receiver_state)"
    echo "B's alert-started runs: $(exporter_get "$CASE" B '/api/v1/probes?limit=20' | python3 -c '
import json, sys
for run in json.load(sys.stdin)["probes"]:
    if run.get("trigger"):
        print(run["id"], run["trigger"].get("alertname"), run["state"], run.get("failure", {}).get("message", "")[:300])' | tr '\n' ';')"
}

# B's runs, oldest first: id, module, what started it, state, and the times the history gives.
b_runs() { # CASE
    exporter_get "$1" B '/api/v1/probes?limit=20' | python3 -c '
import json, sys
runs = json.load(sys.stdin)["probes"]
for run in reversed(runs):
    times = " ".join(f"{k}={v}" for k, v in run.items()
                     if any(w in k for w in ("_at", "time", "duration", "seconds")))
    print(run["id"], run.get("module"), run.get("trigger", {}).get("alertname", "api"),
          run["state"], times)' | tr '\n' ';'
}

# The exporter of HOST as the host reaches it in CASE (B in the by-address case through VM B).
exporter_get() { # CASE HOST PATH
    lab exec --timeout 30 "$2" -- curl -fsS --max-time 10 "http://127.0.0.1:$(port_of "$1" "$2")$3"
}

# One case from scratch: exporters, Prometheus, the fault, the alert, the verdict.
run_case() { # CASE
    local case=$1 host t_fault t_alert t_prom t_am out
    CASE=$case
    note "--- case '$case': B is $(instance_of "$case" B) in Prometheus"
    write_file_sd "$case"
    write_exporter_configs "$case"
    for host in "${HOSTS[@]}"; do start_exporter "$case" "$host"; done
    write_prometheus_config "$case"
    start_prometheus "$case"
    await 90 "Prometheus scraping the four exporters" scrapes_all "$case" >/dev/null
    note "Prometheus in VM $MONITOR scrapes $(tr '\n' ' ' <<<"$(for h in "${HOSTS[@]}"; do instance_of "$case" "$h"; done)")"
    PROM_API=$(prom)/api/v1
    prom_await evaluation "$(now_ms)"
    out=$(alert_firing "$case")
    [[ -z $out ]] || fail "IbprobeRetransmissions fires for B before the fault: $out"

    t_fault=$(now_ms)
    lab exec --timeout 30 B -- tc qdisc add dev eth0 root netem loss "$LOSS_PERCENT%" \
        || fail "cannot add netem to B's eth0"
    LOSS_ON=1
    lab exec --timeout 30 B -- curl -fsS --max-time 10 -XPOST \
        "http://127.0.0.1:$(port_of "$case" B)/api/v1/probes" \
        -d "{\"target\":\"$(lab addr A):9471\",\"module\":\"workload\"}" >/dev/null \
        || fail "cannot start B's write_bw to A"
    out=$(await 120 "IbprobeRetransmissions firing for $(instance_of "$case" B)" alert_firing "$case")
    t_alert=$(now_ms)
    note "fault -> IbprobeRetransmissions firing: $(seconds_since "$t_fault") s ($out)"
    check_runbook "$case"
    out=$(await 120 "the verdict in Prometheus" verdict_in_prometheus "$case")
    t_prom=$(now_ms)
    note "fault -> verdict in Prometheus: $(seconds_since "$t_fault") s ($(seconds_since "$t_alert") s after the alert): $(tr '\n' ' ' <<<"$out")"
    out=$(await 60 "the verdict in Alertmanager" verdict_in_alertmanager "$case")
    t_am=$(now_ms)
    note "fault -> verdict in Alertmanager: $(seconds_since "$t_fault") s ($(seconds_since "$t_alert") s after the alert): $out"
    note "B's runs: $(b_runs "$case")"
    check_sent_on "$case"
    SUMMARY+=("$case ($(instance_of "$case" B)): fault -> alert firing $(ms_as_seconds $((t_alert - t_fault))) s -> verdict in Prometheus $(ms_as_seconds $((t_prom - t_fault))) s, in Alertmanager $(ms_as_seconds $((t_am - t_fault))) s")
    check_dashboards
    lab exec --timeout 30 B -- tc qdisc del dev eth0 root || fail "cannot remove netem"
    LOSS_ON=0
    stop_prometheus "$case"
    for host in "${HOSTS[@]}"; do lab kill "$host" "exporter-$case" >/dev/null; done
}

# The runbook of the firing alert, as the page shows it, names B's exporter: its probe command
# must reach the exporter the alert is about, whatever form its instance takes.
check_runbook() { # CASE
    local url
    url=$(curl -fsS --max-time 10 "$(prom)/api/v1/alerts" | python3 -c '
import json, re, sys
for a in json.load(sys.stdin)["data"]["alerts"]:
    if a["labels"]["alertname"] == "IbprobeRetransmissions" and a["labels"]["instance"] == sys.argv[1]:
        m = re.search(r"curl -s -XPOST http://(\S+)/api/v1/probes", a["annotations"]["runbook"])
        print(m.group(1) if m else "no probe command: " + a["annotations"]["runbook"])
        break' "$(instance_of "$1" B)")
    [[ $url == "$(target_of "$1" B)" ]] \
        || fail "the runbook of IbprobeRetransmissions for $(instance_of "$1" B) posts to '$url', not to B's exporter at $(target_of "$1" B)"
    note "the runbook's probe command posts to $url"
}

# A received the alert and sent it on to B, at the address and port the instance names (A's log
# says where), and B ran it: B gets webhooks only sent on, Alertmanager sends them to A.
check_sent_on() { # CASE
    local sent
    sent=$(lab output --stderr A "exporter-$1" | grep -c "an alert sent on sent to $(target_of "$1" B)$") || true
    ((sent > 0)) || fail "A's log names no alert sent on to $(target_of "$1" B): $(lab output --stderr A "exporter-$1" | grep 'sent on' | tail -5)"
    [[ -n $(prom_rows "ibprobe_alert_notifications_total{instance=\"$(instance_of "$1" B)\",status=\"firing\"} > 0") ]] \
        || fail "B received no alert: $(receiver_state)"
    note "A sent $sent alerts on to $(target_of "$1" B), where B ran the runbook's probe"
}

check_dashboards() {
    # The probe panels show the probe jobs' runs: each job must have scraped one (its first
    # scrape comes up to an interval after Prometheus starts).
    local job
    for job in ibprobe_probe_write_lat ibprobe_probe_write_bw; do
        await 90 "a successful run of $job in Prometheus" prom_rows "probe_success{job=\"$job\"} == 1" >/dev/null
    done
    # The mesh's loss panels show pairs that lost pings: B's loss must have reached the rules.
    await 60 "a mesh pair with loss in Prometheus" \
        prom_rows 'ibprobe:mesh_pair_unexplained_loss_ratio:rate5m > 0' >/dev/null
    mkdir -p "$work/dashboards"
    cp "$LAB_TEST_ROOT"/dashboards/grafana/ibprobe-*.json "$work/dashboards/"
    local args=() entry
    for entry in "${NEEDS_HARDWARE[@]}"; do args+=(--needs-hardware "$entry"); done
    for entry in "${OTHER_FAULT[@]}"; do args+=(--panel-empty-ok "$entry"); done
    python3 "$RUNNER" check --prometheus "$(prom)" --dashboards "$work/dashboards" \
        --rules "$work"/rules/*.rules.yml --range "$WINDOW" --range-seconds 120 \
        --rate-interval 10s --wait 0 --panels-only --vars device=rxe0 --vars port=1 \
        "${args[@]}" || fail "dashboard panels or rules without data (above)"
}

cleanup() {
    ((LOSS_ON)) && lab exec --timeout 30 B -- tc qdisc del dev eth0 root >/dev/null 2>&1
    lab kill "$MONITOR" alertmanager >/dev/null 2>&1
    lab exec --timeout 30 "$MONITOR" -- rm -rf /run/tmp/site-alertmanager /run/tmp/site-prometheus-name \
        /run/tmp/site-prometheus-address >/dev/null 2>&1
    unmount_hosts_file >/dev/null 2>&1
}

main() {
    LOSS_ON=0
    scratch_begin ibprobe-lab-site
    chmod 755 "$work" # the VMs read the configurations from the host's /tmp
    lab_test_begin
    trap 'rc=$?; set +e; cleanup; scratch_cleanup; (exit $rc); lab_test_end' EXIT
    lab_test_up fabric --forward 9470 --forward "$PROM_PORT" --forward "$AM_PORT"
    mount_hosts_file
    mkdir -p "$work/rules"
    python3 "$RUNNER" adapt-rules "$work/rules" "$LAB_TEST_ROOT"/dashboards/prometheus/*.rules.yml \
        --window "$WINDOW" --for "$HOLD"
    start_alertmanager
    SUMMARY=()
    run_case name
    run_case address
    printf '%s\n' "${SUMMARY[@]}" | while read -r line; do note "$line"; done
}

main "$@"

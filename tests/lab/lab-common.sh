# shellcheck shell=bash
#
# Shared helpers of the lab tests (sourced).
#
# Environment:
#   IBPROBE_LAB_SH     lab.sh to use (default: deploy/lab/lab.sh of this tree)
#   IBPROBE_LAB_STATE  lab state dir (default: $TMPDIR/ibprobe-lab-test)
#   IBPROBE_LAB_SHARED the lab shared by a group of tests, as `lab.sh up` takes it ("two
#                      --forward 9470"): a test uses it when it is up and boots it (for itself
#                      and the tests after it) when it is not; unset, a test boots a lab of its
#                      own and takes it down at its end
#   IBPROBE_EXPORTER   the exporter binary, for the tests that call lab_exporter_test

LAB_TEST_ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=tests/lib/scratch.sh
source "$LAB_TEST_ROOT/tests/lib/scratch.sh"
LAB_SH=${IBPROBE_LAB_SH:-$LAB_TEST_ROOT/deploy/lab/lab.sh}
export IBPROBE_LAB_STATE=${IBPROBE_LAB_STATE:-${TMPDIR:-/tmp}/ibprobe-lab-test}
LAB_STARTED=0
LAB_SHARED_IN_USE=0
LAB_TEST_START_MS=0

lab() { "$LAB_SH" "$@"; }

# For the tests that run the exporter in the VMs: EXPORTER, the binary, and RUNNER, the rule
# and dashboard query runner.
lab_exporter_test() {
    # shellcheck disable=SC2034  # used by the sourcing test
    EXPORTER=${IBPROBE_EXPORTER:?set IBPROBE_EXPORTER to the ibprobe_exporter binary}
    # shellcheck disable=SC2034  # used by the sourcing test
    RUNNER=$LAB_TEST_ROOT/tests/dashboards/run_queries.py
}

now_ms() { echo $((${EPOCHREALTIME/./} / 1000)); }

seconds_since() { # START_MS
    local ms=$(($(now_ms) - $1))
    printf '%d.%01d' $((ms / 1000)) $((ms % 1000 / 100))
}

note() { printf '[%6ss] %s\n' "$(seconds_since "$LAB_TEST_START_MS")" "$*"; }

fail() {
    printf 'FAIL: %s\n' "$*" >&2
    exit 1
}

lab_test_begin() {
    LAB_TEST_START_MS=$(now_ms)
    trap lab_test_end EXIT
    [[ -x $LAB_SH ]] || fail "$LAB_SH not found"
}

lab_test_end() {
    local rc=$?
    if ((LAB_SHARED_IN_USE && rc == 0)); then
        lab_shared_release || rc=$?
    fi
    if ((rc != 0)); then
        ((LAB_STARTED || LAB_SHARED_IN_USE)) && lab_vm_network_state
        note "FAILED (exit $rc)"
        lab_keep_console_logs
    fi
    # A shared lab stays up for the next test unless this one failed: the next then boots a
    # new one rather than inherit whatever the failure left behind.
    if ((LAB_STARTED || (LAB_SHARED_IN_USE && rc != 0))); then
        lab down >/dev/null 2>&1 || echo "warning: lab down failed" >&2
    fi
    ((rc != 0)) || note "PASS"
    exit "$rc"
}

# The kernel's counters of packets and connections it dropped or timed out, read from
# /proc/net/snmp and /proc/net/netstat (each a line of names followed by a line of values), as
# "Group:Name=value". Runs in a VM.
lab_drop_counters() {
    awk '$1 == group {
            for (i = 2; i <= NF; i++) if (names[i] ~ wanted) print group names[i] "=" $i
            next
        }
        { group = $1; for (i = 2; i <= NF; i++) names[i] = $i }' \
        wanted='^(InReceives|InDiscards|InNoRoutes|InErrors|RcvbufErrors|ListenOverflows|ListenDrops|TCPTimeouts|TCPSynRetrans|TCPBacklogDrop)$' \
        /proc/net/snmp /proc/net/netstat
}

# The VMs of the lab that are up, on one line.
lab_up_hosts() {
    lab status 2>/dev/null | awk '$1 == "VM" && $3 == "up" { sub(":", "", $2); printf "%s ", $2 }'
}

# Whether each VM still answers, and what its kernel counted on the lab link, while the failed
# test's VMs are up: a peer that fell silent shows here as a VM that does not answer, or as
# packets its NIC or its TCP/UDP layers dropped. First, for every VM, QEMU's and the guest's
# indices of its lab NIC's rings, each with what it means (`lab nic`): a transmit ring stalls on
# frames QEMU has not taken, on an interrupt QEMU owes the guest, or on a guest that asked for
# none. They come first, in a few lines per VM, so that a log cut short still shows them. On the
# host, the queues of the QEMU sockets that carry the link: the stream netdev drops nothing, so
# a VM that stops reading its end holds the other's transmit ring (bytes waiting in a Recv-Q).
lab_vm_network_state() {
    local host
    for host in $(lab_up_hosts); do
        echo "--- VM $host after the failure: its lab NIC's rings (lab nic $host)" >&2
        lab nic "$host" 2>&1 | grep -A1 '^virtqueue' >&2 || true
    done
    echo "--- host: load, QEMU processes, and the link sockets' queues (Recv-Q Send-Q)" >&2
    cat /proc/loadavg >&2
    ps -C qemu-system-x86_64 -o pid=,stat=,pcpu=,etimes= >&2 || true
    ss -xnp 2>/dev/null | awk 'NR == 1 || /qemu/' >&2 || true
    for host in $(lab_up_hosts); do
        echo "--- VM $host after the failure: uptime, lab link, queueing, drop counters" >&2
        lab exec --timeout 15 "$host" -- bash -c "cat /proc/uptime
            ip -s -s link show eth0 2>/dev/null
            tc -s qdisc show dev eth0 2>/dev/null
            $(declare -f lab_drop_counters); lab_drop_counters; true" >&2 \
            || echo "VM $host did not answer within 15 s" >&2
    done
}

# The next test's VMs overwrite the console logs, and a CI run shows only a failed test's
# output: a failure prints the end of each VM's kernel log and keeps a copy of the logs.
lab_keep_console_logs() {
    local logs=$IBPROBE_LAB_STATE/logs log kept
    [[ -d $logs ]] || return 0
    kept=$IBPROBE_LAB_STATE/failed/$(basename -- "$0" .sh)-$(date +%Y%m%dT%H%M%S)
    mkdir -p "$kept" && cp -a "$logs/." "$kept/"
    # And every job's command, output and status (an exporter's log among them), which lab.sh
    # down removes with the rest of the run.
    local jobs
    for jobs in "$IBPROBE_LAB_STATE"/run/*/xchg/jobs; do
        [[ -d $jobs ]] || continue
        mkdir -p "$kept/jobs-$(basename -- "$(dirname -- "$(dirname -- "$jobs")")")"
        cp -a "$jobs/." "$kept/jobs-$(basename -- "$(dirname -- "$(dirname -- "$jobs")")")/" 2>/dev/null || true
    done
    note "console logs kept in $kept"
    for log in "$logs"/*.console.log; do
        [[ -e $log ]] || continue
        echo "--- the end of $(basename -- "$log") (rxe's periodic 'speed is unknown' lines left out):"
        grep -v 'speed is unknown, defaulting to' "$log" | tail -n 30
    done
}

# Runs COMMAND every second until it succeeds; fails the test after SECONDS.
wait_for() { # SECONDS DESCRIPTION COMMAND...
    local limit=$1 what=$2
    local deadline=$((SECONDS + limit))
    shift 2
    until "$@"; do
        ((SECONDS < deadline)) || fail "$what not within $limit s"
        sleep 1
    done
}

# Boots the lab; the EXIT trap takes it down again. With IBPROBE_LAB_SHARED the test uses the
# shared lab when it is up, boots it when it is not, and leaves it up at its end: the mode must
# be the shared lab's, and every forward asked for one that the shared lab has.
lab_test_up() { # one|two|fabric [--forward PORT]...
    local t
    t=$(now_ms)
    lab prepare || fail "lab.sh prepare failed"
    note "prepare: $(seconds_since "$t") s"
    local -a boot=("$@")
    if [[ -n ${IBPROBE_LAB_SHARED:-} ]]; then
        read -ra boot <<<"$IBPROBE_LAB_SHARED"
        lab_shared_covers "${boot[*]}" "$@" \
            || fail "this test needs a lab '$*', which the shared lab '${boot[*]}' is not"
        LAB_SHARED_IN_USE=1
        if lab status >/dev/null 2>&1; then
            LAB_BOOT_SECONDS=$(<"$IBPROBE_LAB_STATE/boot-seconds")
            note "the shared ${boot[*]} lab is up (booted in $LAB_BOOT_SECONDS s by an earlier test)"
            return 0
        fi
    fi
    if lab status >/dev/null 2>&1; then
        fail "a lab is already up in $IBPROBE_LAB_STATE (lab.sh down, or set IBPROBE_LAB_STATE)"
    fi
    t=$(now_ms)
    ((LAB_SHARED_IN_USE)) || LAB_STARTED=1
    if ! lab up "${boot[@]}" >/dev/null; then
        lab down >/dev/null 2>&1
        fail "lab.sh up ${boot[*]} failed"
    fi
    LAB_BOOT_SECONDS=$(seconds_since "$t")
    echo "$LAB_BOOT_SECONDS" >"$IBPROBE_LAB_STATE/boot-seconds"
    note "boot (${boot[0]}-host): $LAB_BOOT_SECONDS s"
}

# Whether a lab booted with SHARED_SPEC serves a test that asks for MODE [--forward PORT]...
lab_shared_covers() { # SHARED_SPEC MODE [--forward PORT]...
    local shared=" $1 " mode=$2
    shift 2
    [[ $shared == " $mode "* ]] || return 1
    while (($#)); do
        [[ $1 == --forward && $shared == *" --forward $2 "* ]] || return 1
        shift 2
    done
}

# What a test hands the next one in a shared lab: no job left running, every cable plugged in,
# no queueing discipline, default route or mount over /etc/hosts added, rxe0 ACTIVE with a RoCE GID of the lab address
# and no QP of a process. Jobs are ended here (their end used to come with the lab's); anything
# else a test changed and did not restore fails it. The VMs are asked at once, in parallel.
lab_shared_release() {
    local mode=${IBPROBE_LAB_SHARED%% *} host left=() dir
    lab reset >&2 || left+=("jobs that did not end")
    dir=$(mktemp -d)
    local -a hosts=() asked=()
    read -ra hosts <<<"$(lab_up_hosts)"
    for host in "${hosts[@]}"; do
        # shellcheck disable=SC2016  # expanded in the VM
        lab exec --timeout 60 "$host" -- bash -c '
            port=/sys/class/infiniband/rxe0/ports/1
            read -r state <"$port/state"
            [[ $state == "4: ACTIVE" ]] || echo "rxe0 port 1 not ACTIVE: $state"
            found=
            for gid in "$port"/gids/*; do
                read -r g <"$gid" 2>/dev/null && [[ $g == *":ffff:0a63:"* ]] && found=1 && break
            done
            [[ -n $found ]] || echo "rxe0 has no GID of the lab address"
            tc qdisc show | grep -E "^qdisc (netem|tbf|htb|prio|red|sfq) " | sed "s/^/added /"
            ip route show default | sed "s/^/added route: /"
            ! mountpoint -q /etc/hosts || echo "a file mounted over /etc/hosts"
            rdma resource show qp | grep " pid " | sed "s/^/QP of a process: /"
            true' >"$dir/$host" 2>&1 || echo "does not answer" >>"$dir/$host" &
        asked+=($!)
    done
    # Only these: the test may leave processes of its own in the background.
    wait "${asked[@]}"
    for host in "${hosts[@]}"; do
        if [[ $mode != one && $(lab link "$host") != up ]]; then
            left+=("VM $host's lab link down")
        fi
        [[ ! -s $dir/$host ]] || left+=("VM $host: $(paste -sd ';' "$dir/$host")")
    done
    rm -rf "$dir"
    if [[ $mode == fabric && $(lab trunk) != up ]]; then
        left+=("the trunk down")
    fi
    ((${#left[@]} == 0)) && return 0
    printf 'FAIL: the test left the shared lab changed: %s\n' "${left[@]}" >&2
    return 1
}

# Waits until a TCP port listens inside a VM.
lab_wait_listen() { # HOST PORT [TIMEOUT_SECS]
    local tries=$((${3:-30} * 5))
    # shellcheck disable=SC2016  # expanded in the VM
    lab exec --timeout $((${3:-30} + 10)) "$1" -- bash -c '
        for ((i = 0; i < $2; i++)); do
            [[ -n $(ss -Htln "sport = :$1") ]] && exit 0
            sleep 0.2
        done
        exit 1' _ "$2" "$tries" || fail "nothing listens on port $2 in VM $1"
}

# The exporter of a VM as the other VMs reach it over the lab link: ADDRESS:9470.
lab_target() { echo "$(lab addr "$1"):9470"; }

# The exporter of a VM as the host reaches it, through the port forwarded to its :9470.
exporter_url() { echo "http://127.0.0.1:$(lab port "$1" 9470)"; }

# Starts ibprobe_exporter (:9470) in VM HOST with the extra ARGS; lab_wait_exporters waits for it.
lab_spawn_exporter() { # HOST EXPORTER ARGS...
    local host=$1 exporter=$2
    shift 2
    lab spawn --name exporter "$host" -- "$exporter" --web.listen-address=:9470 "$@" >/dev/null \
        || fail "cannot start the exporter in VM $host"
}

# Starts ibprobe_exporter (:9470) in both VMs with the extra ARGS and waits until both are ready.
lab_start_exporters() { # EXPORTER ARGS...
    local host
    for host in A B; do lab_spawn_exporter "$host" "$@"; done
    lab_wait_exporters A B
}

# Waits until the exporters of the VMs HOST... answer /-/ready.
lab_wait_exporters() { # HOST...
    local host url deadline
    for host in "$@"; do
        url=$(exporter_url "$host")
        deadline=$((SECONDS + 90))
        until curl -fsS -o /dev/null "$url/-/ready" 2>/dev/null; do
            ((SECONDS < deadline)) || fail "exporter in VM $host not ready: $(lab output --stderr "$host" exporter)"
            sleep 0.5
        done
    done
}

# One PromQL value from the Prometheus at $PROM_API, or nothing when the result is not exactly
# one sample (or Prometheus is not answering yet).
prom_query() { # PROMQL
    curl -fsS --get "$PROM_API/query" --data-urlencode "query=$1" 2>/dev/null | python3 -c '
import json, sys
try:
    r = json.load(sys.stdin)["data"]["result"]
except ValueError:
    r = []
print(r[0]["value"][1] if len(r) == 1 else "")'
}

# Whether the Prometheus at $PROM_API has done, since START_MS (this host's clock, which the
# Prometheus beside it shares), what a check reads: `scrape` every active target, or
# `evaluation` every rule group. A test waits for the one it asserts on instead of sleeping for a
# time that a busy machine may outlast.
prom_done_since() { # scrape|evaluation START_MS
    local path=targets
    [[ $1 == evaluation ]] && path=rules
    curl -fsS "$PROM_API/$path" 2>/dev/null | python3 -c '
import datetime, json, sys
what, since = sys.argv[1], int(sys.argv[2]) / 1000
data = json.load(sys.stdin)["data"]
if what == "scrape":
    stamps = [t["lastScrape"] for t in data["activeTargets"]]
else:
    stamps = [g["lastEvaluation"] for g in data["groups"]]
def seconds(stamp):
    # RFC 3339 with nanoseconds: Python reads at most microseconds.
    day, _, rest = stamp.partition("T")
    clock = rest.rstrip("Z").split("+")[0]
    whole, _, fraction = clock.partition(".")
    at = datetime.datetime.fromisoformat(f"{day}T{whole}+00:00")
    return at.timestamp() + float("0." + (fraction or "0"))
sys.exit(0 if stamps and all(seconds(s) > since for s in stamps) else 1)' "$1" "$2"
}

# Waits until prom_done_since holds (at most SECONDS, default 60).
prom_await() { # scrape|evaluation START_MS [SECONDS]
    wait_for "${3:-60}" "a Prometheus $1 after $(($2 - LAB_TEST_START_MS)) ms into the test" \
        prom_done_since "$1" "$2"
}

lab_hw_counter() { # HOST COUNTER
    lab exec --timeout 60 "$1" -- cat "/sys/class/infiniband/rxe0/ports/1/hw_counters/$2"
}

# perftest turns cycles into time with a clock rate it samples when it reports (get_clock.c,
# sample_get_cpu_mhz): a least-squares fit of RDTSC against gettimeofday over 200 spins of 0.1 to
# 2 ms, refused below r^2 0.9. Each spin reads the two clocks about a microsecond apart at its
# start and end; a vCPU stalled for milliseconds (host steal, preemption) inside one of those
# microseconds is an outlier the fit has no defence against (seen once in about 250 runs: r^2
# 0.557, "BW average 0.00" with -F, "Can't produce a report" without). A spin stalled anywhere
# else counts on both clocks and does no harm. Such a run measured nothing, and perftest says
# so: the pair runs once more, and a second refusal fails with perftest's words. Only the
# client's refusal counts: its report is the one the caller reads.
PERFTEST_CLOCK_REFUSED='Correlation coefficient r\^2: .* < 0\.9'

# Runs a perftest server in VM SERVER and its client in VM CLIENT (the same
# VM in one-host mode: two QPs on one rxe device), both with the lab's ACK timeout
# (LAB_QP_TIMEOUT); prints the client's output. Extra arguments go to both sides.
lab_perftest_pair() { # SERVER CLIENT TOOL ARGS...
    local tool=$3 client_err out refused attempt rc
    client_err=$(mktemp)
    for attempt in 1 2; do
        rc=0
        out=$(perftest_pair_once "$client_err" "$@") || rc=$?
        refused=$(grep -m1 -E "$PERFTEST_CLOCK_REFUSED" "$client_err") || break
        ((attempt == 1)) && note "$tool refused its clock calibration ($refused); the pair runs again" >&2
    done
    rm -f "$client_err"
    [[ -z $refused ]] || fail "$tool refused its clock calibration in two runs in a row: $refused"
    ((rc == 0)) || exit "$rc"
    echo "$out"
}

# One run of the pair; the client's stderr goes to CLIENT_STDERR and then on to stderr.
perftest_pair_once() { # CLIENT_STDERR SERVER CLIENT TOOL ARGS...
    local client_err=$1 srv=$2 cli=$3 tool=$4 gid_srv gid_cli job out rc=0
    shift 4
    : >"$client_err"
    gid_srv=$(lab gid "$srv") || fail "no RoCE v2 GID in VM $srv"
    gid_cli=$(lab gid "$cli") || fail "no RoCE v2 GID in VM $cli"
    job=$(lab spawn --timeout 120 "$srv" -- "$tool" -d rxe0 -x "$gid_srv" -u "$LAB_QP_TIMEOUT" "$@") \
        || fail "cannot start $tool server in VM $srv"
    lab_wait_listen "$srv" 18515
    out=$(lab exec --timeout 120 "$cli" -- "$tool" -d rxe0 -x "$gid_cli" -u "$LAB_QP_TIMEOUT" "$@" \
        "$(lab addr "$srv")" \
        2>"$client_err") || rc=$?
    cat "$client_err" >&2
    if ((rc != 0)); then
        {
            perftest_without_banner <<<"$out"
            echo "--- $tool server in VM $srv:"
            lab output "$srv" "$job" | perftest_without_banner
            lab output --stderr "$srv" "$job"
        } >&2
        lab kill "$srv" "$job" >/dev/null 2>&1
        fail "$tool client in VM $cli exited $rc"
    fi
    lab wait --timeout 60 "$srv" "$job" >/dev/null || fail "$tool server in VM $srv failed"
    echo "$out"
}

# perftest's output without the settings every run of the lab prints alike (device, depths, MTU,
# link type...), so that a failure's log keeps what differs: addresses, results, errors.
perftest_without_banner() {
    grep -Ev '^ (Dual-port|Number of qps|Connection type|PCIe relax order|ibv_wr\* API|TX depth|RX depth|CQ Moderation|Mtu|Link type|GID index|Max inline data|rdma_cm QPs|Data ex\. method) *:|^\*+$|^\* Waiting for client to connect\.\.\. \*$|^$' || true
}

# The ACK timeout of every RC run in the two-host lab that is not about a failure: probe runs
# (-u), probe modules (rc: {timeout: ...}) and perftest pairs (-u). A VM's vCPU descheduled on a
# loaded host can leave an RC window unacknowledged longer than perftest's 67 ms (-u 14); rxe
# then resends the window (go-back-N: completer_retry_err, and the peer's duplicate_request,
# rise), and its responder has been traced (dynamic debug of rxe_resp.c) rejecting the length of
# a packet after such a resend (ERR_LENGTH, answered "remote invalid request"), which fails the
# run; a run that resent has also seen its peer fall silent. 1 s (-u 18) outlasts those pauses;
# what the tests check stays the same. The tests of failures (a cut link, a killed or frozen
# peer, injected loss) keep perftest's default, since the ACK timeout decides how soon a run
# learns of them.
LAB_QP_TIMEOUT=18

# The message size of the lab's runs that draw RNR NAKs on purpose (fewer receives posted than
# messages in flight): one packet at the lab's active MTU of 1024, always a SEND_ONLY. On kernel
# 6.1 overlapping go-back-N resends make rxe's sender and responder disagree on where a
# multi-packet message begins, and the QP fails; deploy/lab/README.md (Limits) has the trace.
RNR_MESSAGE_BYTES=1024

# The verbs objects ibprobe holds in VM HOST (its probes, its responder), one line each.
lab_probe_resources() { # HOST
    # shellcheck disable=SC2016  # expanded in the VM
    lab exec --timeout 60 "$1" -- bash -c '
        for kind in qp cq mr pd; do rdma resource show "$kind" | sed "s/^/$kind: /"; done' \
        | grep 'comm ibprobe' || true
}

# Waits until VM HOST holds no probe resources, failing after BOUND_SECS; prints how long it took.
lab_wait_resources_released() { # HOST BOUND_SECS
    local t left
    t=$(now_ms)
    while left=$(lab_probe_resources "$1"); [[ -n $left ]]; do
        (($(now_ms) - t < $2 * 1000)) || fail "VM $1 still holds probe resources after $2 s: $left"
        sleep 1
    done
    seconds_since "$t"
}

positive_number() { [[ $1 =~ ^[0-9]*\.?[0-9]+$ && ! $1 =~ ^0*\.?0*$ ]]; }

# perftest prints a header row, then the figures.
perftest_field() { # OUTPUT HEADER_REGEX FIELD
    awk -v re="$2" -v f="$3" '$0 ~ re { getline; print $f; exit }' <<<"$1"
}

# Writes OUT: the shipped deploy/config/alertmanager.yml with its probe receiver's webhook at
# RECEIVER_URL (plain HTTP: the shipped basic auth and TLS are for an exporter's
# --web.config.file) and the people's at ONCALL_URL; with MATCHER, the probe route also needs it
# (beside the shipped ones), with INTERVALS ("GROUP REPEAT") its group and repeat intervals.
# Checked with amtool.
lab_alertmanager_config() { # OUT RECEIVER_URL ONCALL_URL [MATCHER [INTERVALS]]
    python3 - "$LAB_TEST_ROOT/deploy/config/alertmanager.yml" "$@" <<'PY' || fail "cannot adapt alertmanager.yml"
import sys, yaml
shipped, out, receiver_url, oncall_url, *extra = sys.argv[1:]
config = yaml.safe_load(open(shipped))
(probes,) = [r for r in config["route"]["routes"] if r["receiver"] == "ibprobe-probes"]
if extra and extra[0]:
    probes["matchers"].append(extra[0])
if len(extra) > 1:
    probes["group_interval"], probes["repeat_interval"] = extra[1].split()
for receiver in config["receivers"]:
    for hook in receiver["webhook_configs"]:
        if receiver["name"] == probes["receiver"]:
            hook["url"] = receiver_url
            del hook["http_config"]
        else:
            hook["url"] = oncall_url
yaml.safe_dump(config, open(out, "w"), sort_keys=False)
PY
    amtool check-config "$1" >"$1.amtool.log" 2>&1 \
        || fail "amtool check-config: $(cat "$1.amtool.log")"
}

# Prometheus on the rules in WORK/rules, scraping the exporter on port 9470 of each VM HOST every
# 2 s with INSTANCE as its instance label; returns once it scrapes them all (lab_start_prometheus).
# With LAB_ALERTMANAGER (HOST:PORT) set, Prometheus sends its alerts there.
lab_prometheus_of_exporters() { # WORK HOST=INSTANCE...
    local work=$1 pair targets= alerting=
    [[ -z ${LAB_ALERTMANAGER:-} ]] \
        || alerting="alerting: {alertmanagers: [{static_configs: [{targets: [\"$LAB_ALERTMANAGER\"]}]}]}"
    shift
    for pair in "$@"; do
        targets+="      - {targets: [\"127.0.0.1:$(lab port "${pair%%=*}" 9470)\"], labels: {__lab_instance: \"${pair#*=}\"}}"$'\n'
    done
    cat >"$work/prometheus.yml" <<YAML
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [$(printf '"%s",' "$work"/rules/*.rules.yml | sed 's/,$//')]
$alerting
scrape_configs:
  - job_name: ibprobe
    scrape_interval: 2s
    scrape_timeout: 2s
    static_configs:
${targets}    relabel_configs:
      - {source_labels: [__lab_instance], target_label: instance}
YAML
    lab_start_prometheus "$work/prometheus.yml" $#
}

# Starts a Prometheus on a free loopback port with CONFIG (its data and log beside it), adds its
# pid to the caller's `pids`, sets PROM_API, and waits until it scrapes COUNT exporters of job
# ibprobe.
lab_start_prometheus() { # CONFIG COUNT
    local config=$1 count=$2 dir port deadline
    dir=$(dirname -- "$config")
    port=$(free_port)
    prometheus --config.file="$config" --storage.tsdb.path="$dir/tsdb" \
        --web.listen-address="127.0.0.1:$port" >"$dir/prometheus.log" 2>&1 &
    pids+=($!)
    PROM_API=http://127.0.0.1:$port/api/v1
    deadline=$((SECONDS + 60))
    until [[ $(prom_query 'count(up{job="ibprobe"} == 1)') == "$count" ]]; do
        ((SECONDS < deadline)) || fail "Prometheus does not scrape $count exporters: $(tail -5 "$dir/prometheus.log")"
        sleep 0.5
    done
}

# The exporter configuration of each VM HOST in a mesh lab, DIR/ibprobe-HOST.yml: the mesh on,
# its peers from DIR/peers.json (each pinged PEER_RATE times a second, default the exporter's),
# a short write_lat module for probes between the hosts.
lab_write_mesh_configs() { # DIR [--peer-rate=PEER_RATE] HOST...
    local dir=$1 host rate=
    shift
    if [[ $1 == --peer-rate=* ]]; then
        rate="  peer_rate: ${1#*=}"
        shift
    fi
    for host in "$@"; do
        cat >"$dir/ibprobe-$host.yml" <<YAML
modules:
  write_lat:
    kind: write_lat
    iterations: 20
    timeout: 30s
mesh:
  enabled: true
  peers_file: $dir/peers.json
  self: "$(lab_target "$host")"
${rate}
YAML
    done
}

# One mesh sample of HOST's exposition towards PEER: FAMILY, with an optional label substring.
mesh_sample() { # HOST PEER FAMILY [LABEL_SUBSTRING]
    local body
    # Whole, then searched: awk leaving early would fail curl's write (and the pipeline).
    body=$(curl -fsS "$(exporter_url "$1")/metrics") || return 1
    awk -v f="$3" -v p="peer=\"$(lab_target "$2")\"" -v l="${4:-}" '
        index($0, f "{") == 1 && index($0, p) && index($0, l) { print $NF; found = 1; exit }
        END { exit !found }' <<<"$body"
}

# One sample of HOST's RTT histogram of a path class (same_tor or cross_tor): FAMILY (one of
# rdma_mesh_class_rtt_seconds_{count,sum,bucket}), with an optional label substring. With one
# peer of that class in the plan it is that peer's.
mesh_class_sample() { # HOST REASON FAMILY [LABEL_SUBSTRING]
    local body
    body=$(curl -fsS "$(exporter_url "$1")/metrics") || return 1
    awk -v f="$3" -v r="reason=\"$2\"" -v l="${4:-}" '
        index($0, f "{") == 1 && index($0, r) && index($0, l) { print $NF; found = 1; exit }
        END { exit !found }' <<<"$body"
}

# Pings of HOST to PEER answered so far: sent minus lost (the mesh counts a ping in both once it
# ended, answered or timed out; RTT histograms are per path class, not per peer).
mesh_answered() { # HOST PEER
    local sent lost
    sent=$(mesh_sample "$1" "$2" rdma_mesh_pings_sent_total) || return 1
    lost=$(mesh_sample "$1" "$2" rdma_mesh_pings_lost_total) || return 1
    echo $((${sent%.*} - ${lost%.*}))
}

# Whether HOST has had at least COUNT of its pings to PEER answered.
answered_at_least() { # HOST PEER COUNT
    local n
    n=$(mesh_answered "$1" "$2") || return 1
    ((n >= $3))
}

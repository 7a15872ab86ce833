#!/bin/bash
#
# Lab smoke test, two-host mode: two VMs with an rxe device each, joined by a
# QEMU socket network. Checks that both ports are ACTIVE, runs perftest's
# ib_write_bw and ib_write_lat from B (client) to A (server), checks that the
# rxe hw_counters moved, and records the figures in $IBPROBE_LAB_STATE/reference.txt. Also
# checks the lab's job control: a job name reused right after `lab kill`.
#
# Environment: see lab-common.sh; PERFTEST_BW_ITERS (default 300 messages of
# 64 KiB) and PERFTEST_LAT_ITERS (default 300) size the runs.

set -euo pipefail
# shellcheck source=tests/lab/lab-common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lab-common.sh"

BW_ITERS=${PERFTEST_BW_ITERS:-300}
LAT_ITERS=${PERFTEST_LAT_ITERS:-300}

check_port_active() { # HOST
    local info
    info=$(lab exec --timeout 60 "$1" -- ibv_devinfo -d rxe0) || fail "ibv_devinfo failed in VM $1"
    grep -q 'hca_id:[[:space:]]*rxe0' <<<"$info" || fail "VM $1 has no rxe0: $info"
    grep -q 'state:[[:space:]]*PORT_ACTIVE' <<<"$info" || fail "rxe0 in VM $1 is not ACTIVE: $info"
    note "VM $1: rxe0 port 1 PORT_ACTIVE, link layer $(awk '/link_layer/ {print $2; exit}' <<<"$info")"
}

declare -A COUNTERS=()
read_counters() { # TAG
    local host c
    for host in A B; do
        for c in sent_pkts rcvd_pkts; do
            COUNTERS[$1.$host.$c]=$(lab_hw_counter "$host" "$c") || fail "cannot read $c in VM $host"
        done
    done
}

check_counters_rose() {
    local host c before after
    for host in A B; do
        for c in sent_pkts rcvd_pkts; do
            before=${COUNTERS[before.$host.$c]} after=${COUNTERS[after.$host.$c]}
            ((after > before)) || fail "VM $host $c did not rise ($before -> $after)"
            note "VM $host hw_counters/$c: $before -> $after (+$((after - before)))"
        done
    done
}

# The lab's own job control: a job name used again at once after `lab kill` runs to its end
# (the agent once kept the killed job's SIGTERM time and SIGKILLed its successor 3 s later).
check_reused_job_name() {
    local out rc=0
    lab spawn --name reused A -- sleep 100 >/dev/null || fail "lab spawn failed"
    lab kill A reused
    lab spawn --name reused A -- sh -c 'sleep 5; echo lived' >/dev/null || fail "lab spawn of the reused name failed"
    out=$(lab wait --timeout 30 A reused) || rc=$?
    ((rc == 0)) && [[ $out == lived ]] || fail "a job under a name killed just before ended with $rc: $out"
    note "a job name reused right after lab kill: its job ran to its end"
}

main() {
    lab_test_begin
    lab_test_up two

    local t
    check_port_active A
    check_port_active B
    check_reused_job_name
    read_counters before

    local out bw lat bw_s lat_s
    t=$(now_ms)
    out=$(lab_perftest_pair A B ib_write_bw -F -n "$BW_ITERS")
    bw=$(perftest_field "$out" 'BW average' 4)
    bw_s=$(seconds_since "$t")
    positive_number "$bw" || fail "no BW average in ib_write_bw output: $out"
    note "ib_write_bw 64 KiB x $BW_ITERS: BW average $bw MiB/s (step $bw_s s)"

    t=$(now_ms)
    out=$(lab_perftest_pair A B ib_write_lat -F -n "$LAT_ITERS")
    lat=$(perftest_field "$out" 't_typical' 5)
    lat_s=$(seconds_since "$t")
    positive_number "$lat" || fail "no t_typical in ib_write_lat output: $out"
    note "ib_write_lat 2 B x $LAT_ITERS: t_typical $lat usec (step $lat_s s)"

    read_counters after
    check_counters_rose

    local ref=$IBPROBE_LAB_STATE/reference.txt
    {
        echo "# ibprobe lab reference, $(date -u +%FT%TZ), two-host mode (TCG; compare within one run only)"
        echo "kernel $(lab exec A -- uname -r)"
        echo "boot_seconds $LAB_BOOT_SECONDS"
        echo "ib_write_bw_MiBps $bw"
        echo "ib_write_lat_t_typical_usec $lat"
    } >"$ref"
    note "figures saved to $ref"
}

main "$@"

#!/bin/bash
#
# Lab test, one-host mode: one VM with rxe0 on a dummy netdev. Checks the
# lab.sh contract the other lab tests build on: exit statuses, stdout/stderr,
# working directory, timeouts, background jobs, port forwarding from the host,
# isolation of the VM (restrict=on), and a loopback perftest on rxe0.

set -euo pipefail
# shellcheck source=tests/lab/lab-common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lab-common.sh"

HTTP_PORT=8080

expect_rc() { # WANT DESCRIPTION -- CMD...
    local want=$1 what=$2 rc=0
    shift 3
    "$@" >/dev/null 2>&1 || rc=$?
    ((rc == want)) || fail "$what: exit status $rc, expected $want"
    note "$what: exit status $rc"
}

check_exec_contract() {
    local out err
    expect_rc 0 "exec true" -- lab exec A -- true
    expect_rc 7 "exec exit 7" -- lab exec A -- sh -c 'exit 7'
    expect_rc 127 "exec of a missing command" -- lab exec A -- no-such-command-ibprobe

    out=$(lab exec --cwd / A -- sh -c 'echo out; echo err >&2' 2>/dev/null)
    err=$(lab exec --cwd / A -- sh -c 'echo out; echo err >&2' 2>&1 >/dev/null)
    [[ $out == out && $err == err ]] || fail "stdout/stderr mixed up: '$out' / '$err'"
    note "exec keeps stdout and stderr apart"

    out=$(cd "$LAB_TEST_ROOT" && lab exec A -- pwd)
    [[ $out == "$LAB_TEST_ROOT" ]] || fail "exec ran in '$out', expected $LAB_TEST_ROOT"
    # shellcheck disable=SC2016  # expanded in the VM
    out=$(lab exec --env 'IBPROBE_X=a b' A -- sh -c 'echo "$IBPROBE_X"')
    [[ $out == 'a b' ]] || fail "--env not passed: '$out'"
    note "exec runs in the caller's directory and passes --env"

    # The whole host root, /tmp included, is visible in the VM (a checkout may live there).
    local host_dir
    host_dir=$(mktemp -d -p /tmp ibprobe-lab-cwd.XXXXXX)
    out=$(cd "$host_dir" && lab exec A -- pwd)
    [[ $out == "$host_dir" ]] || fail "exec from $host_dir ran in '$out'"
    # A caller's directory the VM lacks (gone before the job starts) falls back to /.
    out=$(cd "$host_dir" && rmdir "$host_dir" && lab exec A -- pwd) || true
    [[ $out == / ]] || fail "exec from a directory the VM lacks ran in '$out', expected /"
    expect_rc 125 "exec --cwd of a directory the VM lacks" -- lab exec --cwd "$host_dir" A -- true

    local t rc=0
    t=$(now_ms)
    err=$(lab exec --timeout 2 A -- sleep 60 2>&1) || rc=$?
    ((rc == 124)) || fail "timeout: exit status $rc, expected 124"
    grep -q 'timeout' <<<"$err" || fail "timeout not reported: $err"
    note "exec --timeout 2 of sleep 60: status 124 after $(seconds_since "$t") s ($err)"
}

check_background_and_forwarding() {
    local job hport body i
    job=$(lab spawn --name web A -- busybox httpd -f -p "$HTTP_PORT" -h "$LAB_TEST_ROOT/tests/lab")
    [[ $job == web ]] || fail "spawn printed '$job', expected web"
    lab jobs A | grep -q '^web[[:space:]]running' || fail "job web not running: $(lab jobs A)"
    hport=$(lab port A "$HTTP_PORT") || fail "no forwarded port for $HTTP_PORT"
    lab_wait_listen A "$HTTP_PORT"
    for ((i = 0; i < 20; i++)); do
        body=$(curl -fsS -m 5 "http://127.0.0.1:$hport/lab-common.sh" 2>/dev/null) && break
        sleep 0.5
    done
    [[ $body == "$(<"$LAB_TEST_ROOT/tests/lab/lab-common.sh")" ]] \
        || fail "127.0.0.1:$hport did not serve the file from VM A"
    note "host 127.0.0.1:$hport reaches httpd on VM A :$HTTP_PORT"
    lab kill A web
    lab jobs A | grep -q '^web[[:space:]]exited' || fail "job web still running: $(lab jobs A)"
    note "lab kill stopped the job: $(lab jobs A | grep '^web' | cut -f2)"
}

# lab.sh reset ends the jobs still running and forgets every job; the release of a shared lab
# (lab-common.sh) names what a test left changed, here a queueing discipline.
check_reset_and_release() {
    local out
    lab spawn --name sleeper A -- sleep 600 >/dev/null || fail "cannot spawn sleep in VM A"
    lab exec A -- true # a finished job, forgotten as well
    out=$(lab reset 2>&1) || fail "lab reset failed: $out"
    grep -q 'job sleeper in VM A was still running: stopped' <<<"$out" \
        || fail "lab reset did not name the running job: $out"
    [[ -z $(lab jobs A) ]] || fail "jobs left after lab reset: $(lab jobs A)"
    ! lab exec A -- pgrep -x sleep >/dev/null || fail "sleep still runs in VM A after lab reset"
    note "lab reset: $out"

    lab exec A -- tc qdisc add dev dummy0 root netem delay 1ms || fail "cannot add netem in VM A"
    out=$(IBPROBE_LAB_SHARED=one lab_shared_release 2>&1) \
        && fail "the release of a shared lab accepted a VM with netem added: $out"
    grep -q 'VM A: added qdisc netem' <<<"$out" || fail "the release did not name the netem: $out"
    lab exec A -- tc qdisc del dev dummy0 root || fail "cannot remove netem in VM A"
    out=$(IBPROBE_LAB_SHARED=one lab_shared_release 2>&1) \
        || fail "the release refused VM A as booted: $out"
    note "the release of a shared lab refuses an added netem and accepts the VM once it is gone"
}

check_isolation() {
    # Even with a default route, user networking with restrict=on drops
    # everything the VM sends that is not a reply on a forwarded port.
    # The route goes again: the VM is handed on as it was (IBPROBE_LAB_SHARED).
    # shellcheck disable=SC2016  # expanded in the VM
    if lab exec --timeout 60 A -- bash -c '
        ip route add default via 10.0.2.2 dev mgmt0
        reached=1
        timeout 5 bash -c "exec 3<>/dev/tcp/10.0.2.2/22" && reached=0
        timeout 5 bash -c "exec 3<>/dev/tcp/1.1.1.1/80" && reached=0
        ip route del default via 10.0.2.2 dev mgmt0
        exit $reached' 2>/dev/null; then
        fail "VM A reached a network outside the lab"
    fi
    note "VM A reaches neither the host nor the outside network"
}

check_loopback_perftest() {
    local out bw
    out=$(lab_perftest_pair A A ib_write_bw -F -n 300)
    bw=$(perftest_field "$out" 'BW average' 4)
    positive_number "$bw" || fail "no BW average in ib_write_bw output: $out"
    note "loopback ib_write_bw 64 KiB x 300 on rxe0 (one device, two QPs): $bw MiB/s"
}

main() {
    lab_test_begin
    lab_test_up one --forward "$HTTP_PORT"
    local info
    info=$(lab exec A -- ibv_devinfo -d rxe0) || fail "ibv_devinfo failed"
    grep -q 'state:[[:space:]]*PORT_ACTIVE' <<<"$info" || fail "rxe0 not ACTIVE: $info"
    note "VM A: rxe0 PORT_ACTIVE on $(lab exec A -- cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0)"
    check_exec_contract
    check_background_and_forwarding
    check_reset_and_release
    check_isolation
    check_loopback_perftest
}

main "$@"

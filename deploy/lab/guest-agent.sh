#!/bin/bash
#
# Job agent of a Soft-RoCE lab VM. Runs inside the chroot on the host root and
# serves jobs that lab.sh drops into the exchange share (a read-write 9p mount).
#
# Protocol, per job directory XCHG/jobs/NAME/ (created atomically by lab.sh):
#   job.sh    written by lab.sh: the command to run (bash)
#   timeout   written by lab.sh: seconds, 0 = no limit
#   taken     written here when the agent has taken the job
#   pid       written here when the job starts (its process group id)
#   stdout    written here: the job's standard output
#   stderr    written here: the job's standard error
#   cancel    written by lab.sh: stop the job (SIGTERM, SIGKILL 3 s later)
#   timedout  written here when the job ran past its timeout
#   rc        written here when the job has ended: its exit status
#
# pid and rc are written with one write(2) each, without the rename of write_atomic: under TCG
# the rename's mv process costs about 190 ms, a quarter of a short job. The file exists empty for
# a moment before its write, so lab.sh takes it as written once it is non-empty (-s).
#
# lab.sh writes a byte to the virtio-serial port "ibprobe-lab.wake" after
# each change, so the agent sleeps instead of polling the 9p share (directory
# scans over 9p are expensive under TCG). Without the port it polls.
#
# Jobs run concurrently, each in its own process group, with stdin from /dev/null.

set -uo pipefail

XCHG=${1:?usage: guest-agent.sh XCHG_DIR}
JOBS=$XCHG/jobs
WAKE_PORT_NAME=ibprobe-lab.wake
KILL_GRACE_SECS=3
IDLE_SECS=5    # scan at least this often even without a wake-up
POLL_SECS=0.25 # scan interval when there is no wake port

declare -A job_deadline=() # running job -> epoch seconds, 0 = none
declare -A job_killed=()   # running job -> epoch seconds of its SIGTERM

write_atomic() { # FILE CONTENT
    printf '%s\n' "$2" >"$1.tmp" && mv -f "$1.tmp" "$1"
}

# One write(2) of a short line (bash's printf flushes once): readers wait for a non-empty file.
write_once() { # FILE CONTENT
    printf '%s\n' "$2" >"$1"
}

# A subshell supervises each job, so the exit status is recorded the moment
# the job ends, without the agent having to notice.
start_job() { # NAME
    local name=$1 dir=$JOBS/$1 limit=0
    [[ -r $dir/timeout ]] && read -r limit <"$dir/timeout"
    [[ $limit =~ ^[0-9]+$ ]] || limit=0
    : >"$dir/taken"
    (
        # Job control gives the job a process group of its own (cheaper than setsid). The job
        # script runs in a forked subshell rather than a new bash: under TCG, starting bash from
        # the 9p root costs about 100 ms of every job. It sets its own environment and ends in
        # exec; the agent's shell options are reset to bash's defaults first.
        set -m
        (
            set +euo pipefail
            # shellcheck disable=SC1090  # written by lab.sh
            . "$dir/job.sh"
        ) </dev/null >"$dir/stdout" 2>"$dir/stderr" &
        pid=$!
        write_once "$dir/pid" "$pid"
        wait "$pid"
        rc=$?
        # Leftovers of the job's process group go with it.
        kill -KILL -- "-$pid" 2>/dev/null
        write_once "$dir/rc" "$rc"
    ) 2>/dev/null &
    # A job of the same name killed before may not have been seen to end: its SIGTERM time must
    # not make this one's SIGKILL due.
    unset "job_killed[$name]"
    job_deadline[$name]=0
    ((limit > 0)) && job_deadline[$name]=$((EPOCHSECONDS + limit))
    return 0
}

signal_job() { # NAME SIGNAL
    local pid
    read -r pid <"$JOBS/$1/pid" 2>/dev/null || return 0
    [[ $pid =~ ^[0-9]+$ ]] || return 0
    kill "-$2" -- "-$pid" 2>/dev/null || kill "-$2" "$pid" 2>/dev/null
}

police_job() { # NAME
    local name=$1 dir=$JOBS/$1 deadline=${job_deadline[$1]}
    if [[ -s $dir/rc || ! -d $dir ]]; then
        unset "job_deadline[$name]" "job_killed[$name]"
    elif [[ -n ${job_killed[$name]:-} ]]; then
        ((EPOCHSECONDS >= job_killed[$name] + KILL_GRACE_SECS)) && signal_job "$name" KILL
    elif [[ -e $dir/cancel ]]; then
        signal_job "$name" TERM
        job_killed[$name]=$EPOCHSECONDS
    elif ((deadline > 0 && EPOCHSECONDS >= deadline)); then
        : >"$dir/timedout"
        signal_job "$name" TERM
        job_killed[$name]=$EPOCHSECONDS
    fi
}

scan_jobs() {
    local dir name
    for dir in "$JOBS"/*; do
        name=${dir##*/}
        [[ $name == '*' || -e $dir/taken || ! -e $dir/job.sh ]] && continue
        start_job "$name"
    done
    for name in "${!job_deadline[@]}"; do police_job "$name"; done
}

# Sets BUDGET to the seconds until the next deadline or SIGKILL escalation
# is due (at most IDLE_SECS).
sleep_budget() {
    local name due best=$IDLE_SECS
    for name in "${!job_deadline[@]}"; do
        due=${job_deadline[$name]}
        [[ -n ${job_killed[$name]:-} ]] && due=$((job_killed[$name] + KILL_GRACE_SECS))
        ((due > 0 && due - EPOCHSECONDS < best)) && best=$((due - EPOCHSECONDS))
    done
    ((best < 1)) && best=1
    BUDGET=$best
}

find_wake_port() {
    local port name
    for port in /sys/class/virtio-ports/*; do
        [[ -r $port/name ]] || continue
        read -r name <"$port/name"
        [[ $name == "$WAKE_PORT_NAME" ]] && {
            echo "/dev/${port##*/}"
            return 0
        }
    done
    return 1
}

# Jobs left over by a previous agent instance cannot be supervised any more.
abandon_orphans() {
    local dir
    for dir in "$JOBS"/*/; do
        [[ -e $dir/taken && ! -s $dir/rc ]] || continue
        echo "lab agent restarted; job lost" >>"$dir/stderr"
        write_once "$dir/rc" 125
    done
}

main() {
    mkdir -p "$JOBS"
    ulimit -l unlimited 2>/dev/null
    ulimit -n 65536 2>/dev/null
    abandon_orphans
    local port
    if port=$(find_wake_port) && exec 9<"$port"; then
        write_atomic "$XCHG/agent" "$$ wake=$port"
        while :; do
            scan_jobs
            sleep_budget
            # Any bytes wake us up; drain what is queued so one scan serves them all.
            if read -r -t "$BUDGET" -N 1 -u 9 _; then
                read -r -t 0.01 -N 4096 -u 9 _ || true
            fi
        done
    else
        # A FIFO opened read-write never delivers data: `read -t` on it is a
        # sleep that costs no process.
        local tick=/run/lab-agent.tick
        rm -f "$tick" && mkfifo "$tick" && exec 9<>"$tick"
        write_atomic "$XCHG/agent" "$$ poll"
        while :; do
            scan_jobs
            read -r -t "$POLL_SECS" -u 9 _ || true
        done
    fi
}

main

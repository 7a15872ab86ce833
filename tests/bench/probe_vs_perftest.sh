#!/usr/bin/env bash
# Agreement of the verbs probes with perftest, measured well enough to tell 5 %: the same rxe
# devices, the same effective options (both command lines are printed), ABBA order (perftest
# first in odd rounds, ibprobe first in even ones, so drift and warm-up hit both alike), and the
# median and interquartile range of the per-round ratio ibprobe / perftest for BW average,
# BW peak, message rate (the figure of 8-byte atomics, whose BW perftest prints to 0.01 MiB/s),
# t_min, t_typical, t_avg and p99. One-host loopback (two QPs on one rxe device) and
# two-host.
# Usage: probe_vs_perftest.sh [BUILD_DIR] [ROUNDS] [MODES] [LATENCY_OPTIONS] [VERB] [VERB_OPTIONS]
#   defaults: build, 15, "one two", none, write, none; LATENCY_OPTIONS are given to both tools'
#   latency runs, e.g. "-e" with VERB send to compare completion events with ib_send_lat -e
#   (perftest refuses -e with write); VERB is write, read, send or atomic, for both kinds (atomics
#   are 8-byte messages); VERB_OPTIONS go to both tools' runs of both kinds, e.g.
#   "-A CMP_AND_SWAP" with atomic, "-c UC" with write or send, or "-R" (both connect through
#   rdma_cm).
set -euo pipefail
cd "$(dirname "$0")/../.."

build=$(realpath "${1:-build}")
rounds=${2:-15}
modes=${3:-one two}
latency_extra=${4:-}
verb=${5:-write}
verb_extra=${6:-}
probe=$build/probes/ibprobe_probe
[[ -x $probe ]] || { echo "build first: $probe" >&2; exit 1; }
lab=$PWD/deploy/lab/lab.sh
export IBPROBE_LAB_STATE=${IBPROBE_LAB_STATE:-/tmp/ibprobe-lab-bench}
port=18600
results=$(mktemp)
trap 'rm -f "$results"; "$lab" down >/dev/null 2>&1 || true' EXIT

# One option set per kind, spelled for both tools. Both apply perftest's effective defaults on
# top (tx depth 128, CQ moderation 1 above 8 KiB, inline 0 on rxe), which ibprobe prints.
bw_size=65536 lat_size=2
[[ $verb == atomic ]] && bw_size=8 lat_size=8
# A UD message is one packet: the lab's path MTU, which perftest refuses to exceed when asked.
[[ " $verb_extra " == *" -c UD "* ]] && bw_size=1024
bw_options() { echo "-s $bw_size -n $1${verb_extra:+ $verb_extra}"; }
lat_options="-s $lat_size -n 1000${latency_extra:+ $latency_extra}${verb_extra:+ $verb_extra}"

# perftest's server listens on TCP port 18515, or with -R on an rdma_cm id at that port, which
# only the RDMA resource tracking shows.
perftest_listening() { # SERVER
  if [[ " $verb_extra " == *" -R "* ]]; then
    "$lab" exec "$1" -- rdma resource show cm_id | grep -q 'state LISTEN .*:18515 *$'
  else
    "$lab" exec "$1" -- ss -Htln 'sport = :18515' | grep -q .
  fi
}

perftest_run() { # SERVER CLIENT TOOL OPTIONS...
  local server=$1 client=$2 tool=$3 job out
  shift 3
  job=$("$lab" spawn --timeout 300 "$server" -- "$tool" -d rxe0 -x "$("$lab" gid "$server")" -F "$@")
  for _ in $(seq 100); do
    perftest_listening "$server" && break
    sleep 0.2
  done
  out=$("$lab" exec --timeout 300 "$client" -- "$tool" -d rxe0 -x "$("$lab" gid "$client")" -F "$@" \
    "$("$lab" addr "$server")")
  "$lab" wait --timeout 60 "$server" "$job" >/dev/null
  echo "$out"
}

# perftest's result row follows its header row.
perftest_columns() { # OUTPUT HEADER_REGEX FIELD...
  local out=$1 re=$2
  shift 2
  awk -v re="$re" -v fields="$*" '$0 ~ re { getline; n = split(fields, f, " ");
    for (i = 1; i <= n; i++) printf "%s%s", (i > 1 ? " " : ""), $f[i]; print ""; exit }' <<<"$out"
}

probe_field() { sed -n "s/.*\b$2=\([0-9.]*\).*/\1/p" <<<"$1" | head -n1; }

one_round() { # MODE ROUND BW_ITERATIONS
  local mode=$1 round=$2 iterations=$3 server=A client=B order tool out
  [[ $mode == one ]] && client=A
  order="perftest ibprobe"
  ((round % 2 == 0)) && order="ibprobe perftest"
  for tool in $order; do
    if [[ $tool == perftest ]]; then
      # shellcheck disable=SC2046
      out=$(perftest_run "$server" "$client" "ib_${verb}_bw" $(bw_options "$iterations"))
      read -r peak average msg_rate < <(perftest_columns "$out" 'BW average' 3 4 5)
      echo "$mode $round perftest bw_average $average" >>"$results"
      echo "$mode $round perftest bw_peak $peak" >>"$results"
      echo "$mode $round perftest msg_rate_Mpps $msg_rate" >>"$results"
      # shellcheck disable=SC2086
      out=$(perftest_run "$server" "$client" "ib_${verb}_lat" $lat_options)
      read -r t_min t_typical t_avg p99 < <(perftest_columns "$out" 't_typical' 3 5 6 8)
    else
      # shellcheck disable=SC2046
      out=$("$lab" exec --timeout 300 "$client" -- "$probe" run -d rxe0 -t "${verb}_bw" \
        $(bw_options "$iterations") "$("$lab" addr "$server"):$port")
      echo "$mode $round ibprobe bw_average $(probe_field "$out" bw_average_MiBps)" >>"$results"
      echo "$mode $round ibprobe bw_peak $(probe_field "$out" bw_peak_MiBps)" >>"$results"
      echo "$mode $round ibprobe msg_rate_Mpps $(probe_field "$out" msg_rate_Mpps)" >>"$results"
      ((round == 1)) && echo "  ibprobe used: $(grep '^used' <<<"$out")" >&2
      # shellcheck disable=SC2086
      out=$("$lab" exec --timeout 300 "$client" -- "$probe" run -d rxe0 -t "${verb}_lat" $lat_options \
        "$("$lab" addr "$server"):$port")
      ((round == 1)) && echo "  ibprobe latency used: $(grep '^used' <<<"$out")" >&2
      t_min=$(probe_field "$out" t_min_usec)
      t_typical=$(probe_field "$out" t_typical_usec)
      t_avg=$(probe_field "$out" t_avg_usec)
      p99=$(probe_field "$out" p99_usec)
    fi
    for figure in t_min t_typical t_avg p99; do
      echo "$mode $round $tool $figure ${!figure}" >>"$results"
    done
  done
}

for mode in $modes; do
  "$lab" prepare >/dev/null
  "$lab" up "$mode" >/dev/null
  "$lab" spawn --name responder A -- "$probe" serve -d rxe0 --listen ":$port" >/dev/null
  iterations=2000
  [[ $mode == two ]] && iterations=500
  # Small messages (8-byte atomics, MTU-sized datagrams) take tens to hundreds of microseconds
  # each here: 500 of them are over in a time a scheduling hiccup of either VM distorts.
  ((bw_size <= 1024)) && iterations=$((iterations * 10))
  echo "$mode-host: perftest: ib_${verb}_bw -d rxe0 -x GID -F $(bw_options "$iterations") ;" \
    "ib_${verb}_lat -d rxe0 -x GID -F $lat_options" >&2
  echo "$mode-host: ibprobe:  ibprobe_probe run -d rxe0 -t ${verb}_bw $(bw_options "$iterations") ;" \
    "ibprobe_probe run -d rxe0 -t ${verb}_lat $lat_options" >&2
  for ((round = 1; round <= rounds; round++)); do
    one_round "$mode" "$round" "$iterations"
    echo "$mode-host round $round of $rounds done" >&2
  done
  "$lab" down >/dev/null
done

python3 - "$results" "$rounds" "$latency_extra $verb_extra" "$verb" <<'EOF'
import statistics, sys
from collections import defaultdict
rows = [line.split() for line in open(sys.argv[1])]
figures = defaultdict(dict)
for mode, rnd, tool, figure, value in rows:
    figures[(mode, figure)].setdefault(int(rnd), {})[tool] = float(value)
print(f"{sys.argv[4]}_bw / {sys.argv[4]}_lat {sys.argv[3]}, rxe in the lab (QEMU TCG), {sys.argv[2]} ABBA rounds; ratio = ibprobe / perftest per round")
print(f"{'mode':<8} {'figure':<13} {'perftest med':>12} {'ibprobe med':>12} {'ratio med':>10} {'ratio IQR':>16} {'rounds':>6}")
for (mode, figure), by_round in figures.items():
    pairs = [(r['perftest'], r['ibprobe']) for r in by_round.values()
             if 'perftest' in r and 'ibprobe' in r and r['perftest'] > 0]
    if not pairs:
        continue
    ratios = sorted(i / p for p, i in pairs)
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    print(f"{mode + '-host':<8} {figure:<13} {statistics.median(p for p, _ in pairs):12.6g} "
          f"{statistics.median(i for _, i in pairs):12.6g} {statistics.median(ratios):10.3f} "
          f"{q[0]:7.3f}..{q[2]:<7.3f} {len(pairs):6d}")
EOF

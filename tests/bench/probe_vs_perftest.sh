#!/usr/bin/env bash
# Accuracy of the verbs probes against perftest, side by side in one two-host lab run: the same
# rxe devices, the same options, alternating rounds so both see the same machine state.
# Prints per-kind medians and the ratio ibprobe/perftest (BW average; t_typical for latency).
# Usage: probe_vs_perftest.sh [BUILD_DIR] [ROUNDS] [ITERATIONS]   (defaults: build, 5, 1000)
set -euo pipefail
cd "$(dirname "$0")/../.."

build=$(realpath "${1:-build}")
rounds=${2:-5}
iterations=${3:-1000}
probe=$build/probes/ibprobe_probe
[[ -x $probe ]] || { echo "build first: $probe" >&2; exit 1; }
lab=$PWD/deploy/lab/lab.sh
export IBPROBE_LAB_STATE=${IBPROBE_LAB_STATE:-/tmp/ibprobe-lab-bench}
port=18600

"$lab" prepare
"$lab" up two >/dev/null
trap '"$lab" down >/dev/null' EXIT
"$lab" spawn --name responder A -- "$probe" serve -d rxe0 --listen ":$port" >/dev/null
server=$("$lab" addr A)
gid_a=$("$lab" gid A)
gid_b=$("$lab" gid B)

perftest_figure() { # TOOL -> BW average (MiB/s) or t_typical (usec)
  local tool=$1 column=4 header='BW average' job out
  [[ $tool == *_lat ]] && column=5 header='t_typical'
  job=$("$lab" spawn A -- "$tool" -d rxe0 -x "$gid_a" -F -n "$iterations")
  for _ in $(seq 50); do
    "$lab" exec A -- ss -Htln 'sport = :18515' | grep -q . && break
    sleep 0.2
  done
  out=$("$lab" exec --timeout 300 B -- "$tool" -d rxe0 -x "$gid_b" -F -n "$iterations" "$server")
  "$lab" wait --timeout 60 A "$job" >/dev/null
  awk -v re="$header" -v f="$column" '$0 ~ re { getline; print $f; exit }' <<<"$out"
}

ibprobe_figure() { # KIND
  local field=bw_average_MiBps
  [[ $1 == *_lat ]] && field=t_typical_usec
  "$lab" exec --timeout 300 B -- "$probe" run -d rxe0 -t "$1" -n "$iterations" "$server:$port" |
    sed -n "s/.*\b$field=\([0-9.]*\).*/\1/p"
}

declare -A figures
for ((round = 1; round <= rounds; round++)); do
  for kind in write_bw write_lat read_bw read_lat send_bw send_lat; do
    figures[$kind.perftest]+=" $(perftest_figure "ib_$kind")"
    figures[$kind.ibprobe]+=" $(ibprobe_figure "$kind")"
  done
  echo "round $round of $rounds done" >&2
done

median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "two-host lab (rxe over QEMU, TCG), $iterations iterations, $rounds alternating rounds; medians"
printf '%-10s %-22s %12s %12s %8s\n' kind figure perftest ibprobe ratio
for kind in write_bw write_lat read_bw read_lat send_bw send_lat; do
  unit='BW average MiB/s'
  [[ $kind == *_lat ]] && unit='t_typical usec'
  p=$(median <<<"${figures[$kind.perftest]}")
  i=$(median <<<"${figures[$kind.ibprobe]}")
  printf '%-10s %-22s %12.2f %12.2f %8.3f\n' "$kind" "$unit" "$p" "$i" "$(awk -v a="$i" -v b="$p" 'BEGIN { print a / b }')"
  echo "  perftest:${figures[$kind.perftest]}" >&2
  echo "  ibprobe: ${figures[$kind.ibprobe]}" >&2
done

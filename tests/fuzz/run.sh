#!/usr/bin/env bash
# Runs every libFuzzer harness of tests/fuzz for a bounded time.
# Usage: tests/fuzz/run.sh BUILD_DIR SECONDS_PER_TARGET
#   BUILD_DIR: configured with CC=clang-19 CXX=clang++-19 -DIBPROBE_FUZZ=ON and the ibprobe_fuzz
#   target built. For each harness <target>.cpp: first every file of regressions/<target>/ must
#   run clean, then fuzz_<target> mutates a scratch copy of corpus/<target>/ plus the regression
#   inputs for SECONDS_PER_TARGET, IBPROBE_FUZZ_JOBS harnesses at a time (default: one per core).
#   A crash, sanitizer report, failed property, leak or slow input fails the run; its input is
#   kept under BUILD_DIR/fuzz-artifacts/ (commit it to regressions/<target>/ once fixed). New
#   coverage found is left in the scratch copy; to keep it, merge it into the committed corpus
#   with fuzz_<target> -merge=1 corpus/<target> DIR.
set -euo pipefail

if (($# != 2)) || ! [[ "$2" =~ ^[0-9]+$ ]]; then
  echo "usage: $0 BUILD_DIR SECONDS_PER_TARGET" >&2
  exit 2
fi
build_dir=$(cd "$1" && pwd)
seconds=$2
here=$(cd "$(dirname "$0")" && pwd)
artifacts=$build_dir/fuzz-artifacts
scratch=$(mktemp -d "${TMPDIR:-/tmp}/ibprobe-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$artifacts"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# Past a page-sized attribute and a 256-byte MAD with room to spare; small enough to stay fast.
max_len=8192
# An input that takes this long is a finding (a peer could stall the decoder), not noise.
slow_input_seconds=25

targets=()
for source in "$here"/*.cpp; do
  targets+=("$(basename "$source" .cpp)")
done

# One harness: its report goes to stdout and stderr, its summary line to $scratch/TARGET.line and
# the reason it failed, if it did, to $scratch/TARGET.failed.
fuzz_target() { # TARGET
  local target=$1 binary=$build_dir/tests/fuzz/fuzz_$1
  fail_target() { echo "$1" >"$scratch/$target.failed"; }
  echo "== fuzz $target"
  if [[ ! -x "$binary" ]]; then
    echo "   $binary is missing: build the ibprobe_fuzz target" >&2
    fail_target "$target (not built)"
    return
  fi

  local regressions=() log
  if [[ -d "$here/regressions/$target" ]]; then
    mapfile -t regressions < <(find "$here/regressions/$target" -type f | sort)
  fi
  if ((${#regressions[@]} > 0)); then
    log=$scratch/$target-regressions.log
    if "$binary" -timeout="$slow_input_seconds" "${regressions[@]}" >"$log" 2>&1; then
      echo "   regressions: ${#regressions[@]} inputs pass"
    else
      tail -n 40 "$log" >&2
      echo "   regressions: FAILED (log above)" >&2
      fail_target "$target (regression input)"
      return
    fi
  fi

  local corpus=$scratch/$target-corpus dir seeds
  mkdir -p "$corpus"
  for dir in "$here/corpus/$target" "$here/regressions/$target"; do
    if [[ -d "$dir" ]]; then
      cp "$dir"/* "$corpus"/ 2>/dev/null || true
    fi
  done
  seeds=$(find "$corpus" -type f | wc -l)
  if ((seeds == 0)); then
    echo "   no seeds in corpus/$target/" >&2
    fail_target "$target (empty corpus)"
    return
  fi

  # A dictionary of the format's tokens (<target>.dict) lets mutations reach keywords that are
  # compared inside uninstrumented libraries (number parsing in libstdc++, for one).
  local dict=() status=0 last cov features units line
  [[ -f "$here/$target.dict" ]] && dict=(-dict="$here/$target.dict")
  log=$scratch/$target.log
  "$binary" -max_total_time="$seconds" -max_len="$max_len" -timeout="$slow_input_seconds" \
    "${dict[@]}" -print_final_stats=1 -artifact_prefix="$artifacts/$target-" "$corpus" \
    >"$log" 2>&1 || status=$?
  stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -n 1; }
  last=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  features=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  units=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")
  line=$(printf '%-18s execs %-10s exec/s %-7s cov %-5s ft %-6s corpus %s->%s' "$target" \
    "$(stat number_of_executed_units)" "$(stat average_exec_per_sec)" "${cov:-?}" \
    "${features:-?}" "$seeds" "${units:-?}")
  echo "$line" >"$scratch/$target.line"
  if ((status != 0)); then
    grep -E 'ERROR|property failed|runtime error|SUMMARY|Test unit written' "$log" >&2 || true
    tail -n 60 "$log" >&2
    echo "   FAILED: exit $status, input kept in $artifacts/" >&2
    fail_target "$target"
  else
    echo "   $line"
  fi
}

# The harnesses run IBPROBE_FUZZ_JOBS at a time (default: one per core), each single-threaded
# for its SECONDS_PER_TARGET; their reports are printed in order once all have ended.
parallel=${IBPROBE_FUZZ_JOBS:-$(nproc)}
running=0
for target in "${targets[@]}"; do
  fuzz_target "$target" >"$scratch/$target.out" 2>&1 &
  if ((++running >= parallel)); then
    wait -n || true
    running=$((running - 1))
  fi
done
wait

failed=()
summary=()
for target in "${targets[@]}"; do
  cat "$scratch/$target.out"
  [[ -e $scratch/$target.line ]] && summary+=("$(<"$scratch/$target.line")")
  [[ -e $scratch/$target.failed ]] && failed+=("$(<"$scratch/$target.failed")")
done

echo "== fuzz summary (${seconds}s per target)"
printf '   %s\n' "${summary[@]}"
if ((${#failed[@]} > 0)); then
  echo "failed targets: ${failed[*]}" >&2
fi
echo "fuzz: $((${#targets[@]} - ${#failed[@]})) passed, ${#failed[@]} failed"
((${#failed[@]} == 0))

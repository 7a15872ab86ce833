#!/usr/bin/env bash
# Installs what is needed, builds, and runs every test: unit, end-to-end (real Prometheus, hostile
# requests), fabric (ibsim), rules and dashboards, the Debian package, and lab (real rxe verbs
# devices in QEMU), then the unit and end-to-end tests again under AddressSanitizer and
# UndefinedBehaviorSanitizer, the unit tests under ThreadSanitizer, and a bounded libFuzzer run of
# every parser. Prints each stage's seconds at the end, whether the run passed or not.
#
# Usage: ./test.sh [--quick]   (--quick: the normal build's tests only)
#
# What a run costs, and how to run one stage or one test alone: docs/testing.md.
# ccache, when installed (scripts/install-deps.sh installs it), keeps compiled objects in
# ~/.cache/ccache: a second run on the same machine, from any clone, compiles almost nothing.
# The builds build what their stage runs: the sanitizer builds the unit and end-to-end tests'
# targets, the fuzz build the harnesses.
set -euo pipefail
cd "$(dirname "$0")"
root=$PWD

quick=false
[[ "${1:-}" == "--quick" ]] && quick=true
jobs=$(nproc)
run_start=$SECONDS

# --- stage timing -------------------------------------------------------------------------------
stage_lines=()
record_stage() { # NAME SECONDS STATUS
  stage_lines+=("$(printf '%-34s %6s s  %s' "$1" "$2" "$3")")
}
print_stages() {
  local rc=$?
  echo
  echo "== stages (seconds)"
  printf '   %s\n' "${stage_lines[@]}"
  printf '   %-34s %6s s  %s\n' "whole run" $((SECONDS - run_start)) \
    "$( ((rc == 0)) && echo passed || echo "FAILED (exit $rc)")"
}
trap print_stages EXIT

stage() { # NAME COMMAND...
  local name=$1 start=$SECONDS rc=0
  shift
  echo "== $name"
  "$@" || rc=$?
  record_stage "$name" $((SECONDS - start)) "$( ((rc == 0)) && echo ok || echo "FAILED (exit $rc)")"
  return "$rc"
}

# --- builds -------------------------------------------------------------------------------------
stage "install dependencies" ./scripts/install-deps.sh all

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # Objects compiled in another clone are reused: paths below the tree are hashed relative to it,
  # and the build directory is not hashed into debug information.
  export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=true
  export CCACHE_DIR=${CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ccache}
  export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-8G}
fi

build() { # DIR TARGETS(comma-separated, or all) CMAKE_ARGS...
  local dir=$1 targets=$2
  shift 2
  local -a target_args=()
  [[ $targets == all ]] || target_args=(--target ${targets//,/ })
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIBPROBE_WERROR=ON "${launcher[@]}" \
    "$@" >/dev/null
  cmake --build "$dir" -j "$jobs" "${target_args[@]}" >"$dir.build.log" 2>&1 || {
    grep -E -m 20 'error|Error' "$dir.build.log" >&2
    echo "build of $dir failed: $dir.build.log" >&2
    return 1
  }
}

# What each later stage runs, and so builds: the unit tests (with the probes' test executables)
# and, for ASan's end-to-end tests, the exporter and the fixture generator.
unit_targets=ibprobe_unit_tests,ibprobe_probe_core_tests,ibprobe_probe_unit_tests
asan_targets=$unit_targets,ibprobe_exporter,ibprobe_fixture
# Every build writes line tables only (-g1): a backtrace or a sanitizer's report still names file
# and line, and full debug info cost a third of the compile time (probe_api_test.cpp: 22.6 s at
# -O2 -g, 15.3 s at -O2 -g1). The normal build (and the package, which takes its flags) at -O2;
# the sanitizer and fuzz builds at -O1, which the sanitizers' documentation recommends.
# The normal, ASan and fuzz builds compile in unity batches (a target's sources eight to a compiler
# run), which parses the shared headers once per batch instead of once per file: the ASan build of
# the unit and end-to-end targets took 322 s against 490-542 s file by file. The TSan build
# compiles every file on its own: its targets take every library's sources and every test's, and
# the executables outside it have one source each, so a file that leans on an include of the
# file before it in a batch still fails there.
unity=(-DIBPROBE_UNITY_BUILD=ON)
normal_flags=("-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "${unity[@]}")
sanitizer_flags=("-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG")

stage "build normal (all targets)" build build all "${normal_flags[@]}"

# --- the normal build's tests -------------------------------------------------------------------
ctest_stage() { # NAME LABEL_REGEX [CTEST_ARGS...]
  local name=$1 labels=$2
  shift 2
  stage "$name" ctest --test-dir build --output-on-failure --timeout 900 -L "$labels" "$@"
}
ctest_stage "tests unit" '^unit$' -j "$jobs"
ctest_stage "tests e2e" '^e2e$'
ctest_stage "tests fabric (ibsim)" '^fabric$'
ctest_stage "tests simulation, rules, dashboards, docs" '^(simulation|rules|dashboards|docs)$' -j "$jobs"
ctest_stage "tests package" '^package$'
# Two chains of lab tests, each one lab at a time, side by side (tests/lab/CMakeLists.txt).
ctest_stage "tests lab" '^lab$' -j 2
# Every test carries one of the labels above: a test without one would be left out silently.
unlabelled=$(ctest --test-dir build -N -LE '^(unit|e2e|fabric|simulation|rules|dashboards|docs|package|lab)$' |
  sed -n 's/^Total Tests: //p')
[[ $unlabelled == 0 ]] || { echo "$unlabelled tests carry none of test.sh's labels" >&2; exit 1; }

$quick && exit 0

# --- sanitizers and fuzzing ---------------------------------------------------------------------
stage "build asan/ubsan (unit, e2e targets)" build build-asan "$asan_targets" \
  -DIBPROBE_SANITIZE=ON "${sanitizer_flags[@]}" "${unity[@]}"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  stage "tests asan/ubsan: unit, e2e" \
  ctest --test-dir build-asan --output-on-failure -L '^(unit|e2e)$' -j "$jobs"

stage "build tsan (unit targets)" build build-tsan "$unit_targets" -DIBPROBE_TSAN=ON \
  "${sanitizer_flags[@]}"
TSAN_OPTIONS=halt_on_error=1 \
  stage "tests tsan: unit" ctest --test-dir build-tsan --output-on-failure -L '^unit$' -j "$jobs"

CC=clang-19 CXX=clang++-19 \
  stage "build fuzz (clang 19, harnesses)" build build-fuzz ibprobe_fuzz -DIBPROBE_FUZZ=ON \
  "${sanitizer_flags[@]}" "${unity[@]}"
stage "fuzz runs (${IBPROBE_FUZZ_SECONDS:-20} s per parser)" \
  tests/fuzz/run.sh build-fuzz "${IBPROBE_FUZZ_SECONDS:-20}"

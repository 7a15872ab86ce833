#!/usr/bin/env bash
# Installs what is needed, builds, and runs every test: unit, end-to-end (real Prometheus, hostile
# requests), rules and dashboards, and lab (real rxe verbs devices in QEMU), then the unit and
# end-to-end tests again under AddressSanitizer/UndefinedBehaviorSanitizer, the unit tests under
# ThreadSanitizer, and a bounded libFuzzer run of every parser.
# Usage: ./test.sh [--quick]   (--quick: the normal build's tests only)
set -euo pipefail
cd "$(dirname "$0")"

quick=false
[[ "${1:-}" == "--quick" ]] && quick=true
jobs=$(nproc)

./scripts/install-deps.sh all

build() {  # DIR CMAKE_ARGS...
  local dir=$1
  shift
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIBPROBE_WERROR=ON "$@" >/dev/null
  cmake --build "$dir" -j "$jobs" >/dev/null
}

echo "== build"
build build
echo "== tests: unit, e2e, lab"
ctest --test-dir build --output-on-failure --timeout 900

$quick && exit 0

echo "== ASan/UBSan build: unit and e2e tests"
build build-asan -DIBPROBE_SANITIZE=ON
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -L 'unit|e2e'

echo "== TSan build: unit tests (HTTP server and parallel scrapes)"
build build-tsan -DIBPROBE_TSAN=ON
TSAN_OPTIONS=halt_on_error=1 ctest --test-dir build-tsan --output-on-failure -L unit

# --- fuzzing: libFuzzer harnesses of every parser (tests/fuzz), a bounded run each -------------
echo "== fuzz build (clang 19, libFuzzer + ASan/UBSan): regression inputs, then ${IBPROBE_FUZZ_SECONDS:-20} s per parser"
CC=clang-19 CXX=clang++-19 cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIBPROBE_WERROR=ON \
  -DIBPROBE_FUZZ=ON \
  >/dev/null
cmake --build build-fuzz -j "$jobs" --target ibprobe_fuzz >/dev/null
tests/fuzz/run.sh build-fuzz "${IBPROBE_FUZZ_SECONDS:-20}"
# --- end fuzzing --------------------------------------------------------------------------------

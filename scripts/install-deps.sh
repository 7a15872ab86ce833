#!/usr/bin/env bash
# Installs the Debian 12 packages ibprobe needs to build, run and test. Idempotent: packages
# already present are not fetched again. Needs root (or sudo).
set -euo pipefail

build_packages=(
  cmake g++ make pkg-config git
  libibverbs-dev libibumad-dev libnuma-dev rdma-core ibverbs-utils
  # rdma_cm connections (the probe's rdma_cm: true, perftest's -R)
  librdmacm-dev
  prometheus-cpp-dev libcivetweb-dev libcli11-dev libspdlog-dev libfmt-dev
  libyaml-cpp-dev nlohmann-json3-dev
  # Fabric discovery (libibnetdisc, ibnetdiscover's library) and its PortInfo decoding.
  libibnetdisc-dev libibmad-dev
  libssl-dev libcrypt-dev
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  # io_uring against pread in tests/bench/pread_benchmark.cpp (not linked by the product)
  liburing-dev
  # test.sh compiles through it when present: a second run on the machine compiles almost nothing
  ccache
)
test_packages=(
  prometheus prometheus-node-exporter curl python3 wrk perftest strace
  # amtool checks the example Alertmanager configuration; the alert loop's lab test runs one
  prometheus-alertmanager
  # the recent-runs page is checked as headless Chromium renders it
  chromium
  python3-yaml systemd
  qemu-system-x86 qemu-utils busybox-static kmod cpio iproute2 openssl
  # clang 19: the first Debian 12 clang whose C++20 concepts level lets libstdc++ 12 offer
  # std::expected; the fuzz build needs its libFuzzer runtime.
  clang-19 libclang-rt-19-dev
  # the Debian package (cpack: dpkg-shlibdeps, file) and the scrape benchmark's system calls
  dpkg-dev file strace
  # The simulated InfiniBand fabric of the fabric tests, its SM, and the reference tools.
  ibsim-utils opensm infiniband-diags
  ethtool
)

case "${1:-all}" in
  build) wanted=("${build_packages[@]}") ;;
  all) wanted=("${build_packages[@]}" "${test_packages[@]}") ;;
  *) echo "usage: $0 [build|all]" >&2; exit 2 ;;
esac

missing=()
for package in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' ||
    missing+=("$package")
done
((${#missing[@]} == 0)) && exit 0

sudo=()
((EUID == 0)) || sudo=(sudo)
echo "installing: ${missing[*]}" >&2
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
  "${missing[@]}" >/dev/null

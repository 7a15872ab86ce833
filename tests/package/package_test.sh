#!/usr/bin/env bash
# The Debian package as a site installs it, on this machine (root; CI runs it on its clean
# machine): a packager's build (product only: no test libraries, prefix /usr; Release unless
# CMAKE_ARGS give a build type, as the ctest gives its tree's so that ccache has the objects) and
# `cpack -G DEB` give ibprobe_<version>_amd64.deb; its control data name runtime libraries only
# and mark the /etc files as conffiles; `apt-get install ./ibprobe_...deb` installs it; the
# installed exporter serves a fixture tree; the installed unit passes systemd-analyze verify;
# the installed exporter serves HTTPS with the unversioned libssl.so/libcrypto.so made
# unresolvable (a mount namespace whites them out of the loader's directories, as on a host
# without libssl-dev); `apt-get purge` leaves nothing of it behind. The machine is restored on
# exit: the package purged, /etc files that were there before put back.
# Usage: package_test.sh SOURCE_DIR PACKAGE_BUILD_DIR FIXTURE_BIN [CMAKE_ARGS...]
set -euo pipefail

source_dir=$1
package_build=$2
fixture=$3
shift 3

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
((EUID == 0)) || fail "needs root: it installs and purges a package"

# shellcheck source=tests/lib/scratch.sh
source "$source_dir/tests/lib/scratch.sh"
scratch_begin ibprobe-package

# Files of a previous `cmake --install` (or anything else) at the package's conffile paths are
# kept aside and put back afterwards; an installed ibprobe package is not touched.
if dpkg-query -W -f='${Status}' ibprobe 2>/dev/null | grep -q 'ok installed'; then
  fail "an ibprobe package is already installed; this test installs and purges its own"
fi
saved=()
restore_machine() {
  DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq ibprobe >/dev/null 2>&1 || true
  for path in "${saved[@]}"; do
    mkdir -p "$(dirname "$path")"
    cp -a "$work/saved$path" "$path"
  done
  scratch_cleanup
}
trap restore_machine EXIT
for path in /etc/default/ibprobe-exporter /etc/ibprobe; do
  if [[ -e $path ]]; then
    mkdir -p "$work/saved$(dirname "$path")"
    cp -a "$path" "$work/saved$path"
    rm -rf "$path"
    saved+=("$path")
  fi
done

echo "== packager's build in $package_build"
cmake -S "$source_dir" -B "$package_build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
  -DBUILD_TESTING=OFF "$@" >"$work/configure.log" 2>&1 || fail "configure: $(tail -5 "$work/configure.log")"
! grep -q '^GTest_DIR\|^benchmark_DIR' "$package_build/CMakeCache.txt" ||
  fail "BUILD_TESTING=OFF still looked for the test libraries"
cmake --build "$package_build" -j"$(nproc)" >"$work/build.log" 2>&1 ||
  fail "build: $(grep -m5 -E 'error|warning' "$work/build.log")"
rm -f "$package_build"/ibprobe_*.deb
(cd "$package_build" && cpack -G DEB) >"$work/cpack.log" 2>&1 || fail "cpack: $(tail -5 "$work/cpack.log")"
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$package_build/CMakeCache.txt")
deb=$package_build/ibprobe_${version}_amd64.deb
[[ -f $deb ]] || fail "no $deb: $(ls "$package_build"/*.deb 2>&1)"
echo "package: $(basename "$deb"), $(stat -c %s "$deb") bytes"

depends=$(dpkg-deb -f "$deb" Depends)
for library in libssl3 libcivetweb1 libibverbs1 libibumad3 libyaml-cpp0.7; do
  [[ $depends == *"$library "* || $depends == *"$library," || $depends == *"$library" ]] ||
    fail "Depends lacks $library: $depends"
done
[[ $depends != *-dev* ]] || fail "Depends names a -dev package: $depends"
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles >"$work/conffiles"
diff <(sort "$work/conffiles") <(printf '%s\n' /etc/default/ibprobe-exporter /etc/ibprobe/ibprobe.yml) ||
  fail "conffiles: $(cat "$work/conffiles")"
dpkg-deb --fsys-tarfile "$deb" | tar -t | sed 's|^\./|/|' | grep -v '/$' >"$work/files"
for file in /usr/bin/ibprobe_exporter /usr/bin/ibprobe_probe /usr/lib/systemd/system/ibprobe-exporter.service \
  /usr/lib/ibprobe/libibprobe_civetweb_ssl.so /usr/lib/ibprobe/libibprobe_civetweb_crypto.so \
  /usr/lib/ibprobe/libibprobe_https_client.so \
  /usr/share/ibprobe/prometheus/ibprobe-alerts.rules.yml /usr/share/ibprobe/prometheus/ibprobe-recording.rules.yml \
  /usr/share/ibprobe/grafana/ibprobe-fabric-overview.json /usr/share/ibprobe/examples/prometheus.yml; do
  grep -qx "$file" "$work/files" || fail "package lacks $file"
done
echo "control: Depends $depends; conffiles $(tr '\n' ' ' <"$work/conffiles")"

echo "== apt-get install ./$(basename "$deb")"
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$deb" >"$work/apt.log" 2>&1 ||
  fail "apt-get install: $(tail -5 "$work/apt.log")"
dpkg-query -W -f='${Status}' ibprobe | grep -q 'ok installed' || fail "not installed after apt-get"

unit=/usr/lib/systemd/system/ibprobe-exporter.service
verify=$(systemd-analyze verify "$unit" 2>&1) || fail "systemd-analyze verify: $verify"
[[ -z $verify ]] || fail "systemd-analyze verify reported: $verify"
grep -qx 'ExecStart=/usr/bin/ibprobe_exporter $ARGS' "$unit" || fail "unit runs $(grep ExecStart "$unit")"
echo "systemd-analyze verify $unit: clean"

"$fixture" "$work/sys" >/dev/null
wait_ready() { # URL LOG CURL_ARGS...
  local url=$1 log=$2 deadline=$((SECONDS + 20))
  shift 2
  until curl -fsS -o /dev/null "$@" "$url" 2>/dev/null; do
    kill -0 "${pids[-1]}" 2>/dev/null || fail "exporter exited: $(cat "$log")"
    ((SECONDS < deadline)) || fail "exporter not ready at $url: $(cat "$log")"
    sleep 0.2
  done
}
port=$(free_port)
/usr/bin/ibprobe_exporter --path.sysfs="$work/sys" --web.listen-address="127.0.0.1:$port" \
  --probe.responder-address= --config.file=/etc/ibprobe/ibprobe.yml 2>"$work/exporter.log" &
pids+=($!)
wait_ready "http://127.0.0.1:$port/-/ready" "$work/exporter.log"
curl -fsS "http://127.0.0.1:$port/metrics" >"$work/metrics.txt"
grep -q '^rdma_port_data_transmitted_bytes_total{device="mlx5_0",port="1"} ' "$work/metrics.txt" ||
  fail "installed exporter: no port counters in $(head -c 300 "$work/metrics.txt")"
echo "installed exporter: $(grep -vc '^#' "$work/metrics.txt") samples from the fixture tree"
kill "${pids[-1]}"
wait "${pids[-1]}" 2>/dev/null || true

echo "== HTTPS with libssl3 alone"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
  -addext subjectAltName=DNS:localhost -keyout "$work/server.key" -out "$work/server.crt" >/dev/null 2>&1
printf 'tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n' >"$work/web.yml"
# Every directory the loader finds the unversioned names in gets them whited out by an overlay.
hide_dirs=$( (ldconfig -p | awk '$1 == "libssl.so" || $1 == "libcrypto.so" {print $NF}' |
  xargs -r -n1 dirname; echo /usr/lib/x86_64-linux-gnu) | xargs realpath | sort -u)
tls_port=$(free_port)
cat >"$work/in-namespace.sh" <<SH
set -euo pipefail
n=0
for dir in $hide_dirs; do
  n=\$((n + 1))
  mkdir -p "$work/overlay/\$n/upper" "$work/overlay/\$n/work"
  for name in libssl.so libcrypto.so; do mknod "$work/overlay/\$n/upper/\$name" c 0 0; done
  mount -t overlay overlay -o "lowerdir=\$dir,upperdir=$work/overlay/\$n/upper,workdir=$work/overlay/\$n/work" "\$dir"
done
# The control: the loader no longer resolves the names civetweb asks for, and still the real ones.
python3 -c '
import ctypes, sys
for name in ("libssl.so", "libcrypto.so"):
    try:
        ctypes.CDLL(name)
        sys.exit(name + " still resolves")
    except OSError:
        pass
ctypes.CDLL("libssl.so.3")
print("loader: libssl.so and libcrypto.so unresolvable, libssl.so.3 resolves")
'
exec /usr/bin/ibprobe_exporter --path.sysfs="$work/sys" --web.listen-address="127.0.0.1:$tls_port" \
  --probe.responder-address= --web.config.file="$work/web.yml"
SH
unshare --mount --propagation private bash "$work/in-namespace.sh" >"$work/tls-exporter.log" 2>&1 &
pids+=($!)
wait_ready "https://localhost:$tls_port/-/ready" "$work/tls-exporter.log" --cacert "$work/server.crt" \
  --resolve "localhost:$tls_port:127.0.0.1"
grep -q 'libssl.so and libcrypto.so unresolvable' "$work/tls-exporter.log" ||
  fail "the loader check did not run: $(cat "$work/tls-exporter.log")"
curl -fsS --cacert "$work/server.crt" --resolve "localhost:$tls_port:127.0.0.1" \
  "https://localhost:$tls_port/metrics" >"$work/tls-metrics.txt" || fail "HTTPS scrape failed: $(cat "$work/tls-exporter.log")"
grep -q '^rdma_port_data_transmitted_bytes_total' "$work/tls-metrics.txt" || fail "HTTPS answer has no port counters"
curl -fsS -o /dev/null "http://127.0.0.1:$tls_port/metrics" 2>/dev/null && fail "plain HTTP answered on the TLS port"
echo "installed exporter: HTTPS served with libssl.so/libcrypto.so unresolvable ($(grep -vc '^#' "$work/tls-metrics.txt") samples)"
kill "${pids[-1]}"
wait "${pids[-1]}" 2>/dev/null || true

echo "== apt-get purge ibprobe"
DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq ibprobe >"$work/purge.log" 2>&1 ||
  fail "apt-get purge: $(tail -5 "$work/purge.log")"
! dpkg-query -W -f='${Status}' ibprobe 2>/dev/null | grep -q 'installed' || fail "still known to dpkg after purge"
left=()
while read -r file; do [[ -e $file ]] && left+=("$file"); done <"$work/files"
for dir in /etc/ibprobe /usr/share/ibprobe /usr/lib/ibprobe; do [[ -e $dir ]] && left+=("$dir"); done
((${#left[@]} == 0)) || fail "left behind after purge: ${left[*]}"
echo "purged: none of its $(wc -l <"$work/files") files or directories left"

#!/usr/bin/env bash
# End-to-end: OpenSSL is mapped only by an exporter whose configuration needs it. Without a probe
# secret, passwords or TLS, neither libcrypto nor libssl is in /proc/PID/maps after a scrape; a
# probe secret or basic-auth users load libcrypto at start (and a right password is accepted, a
# wrong one refused); TLS loads libssl as well and serves HTTPS with its settings applied.
# Usage: crypto_loading_test.sh EXPORTER_BINARY FIXTURE_BINARY
set -euo pipefail

# shellcheck source=tests/lib/exporter-checks.sh
source "$(dirname "$0")/../lib/exporter-checks.sh"
exporter_test_begin ibprobe-crypto-loading "$@"

"$fixture_bin" "$work/sys" >/dev/null

start_exporter() { # SCHEME EXTRA_FLAGS...
  local scheme=$1
  shift
  launch_exporter --probe.responder-address= "$@"
  url=$scheme://127.0.0.1:$port
}

stop_exporter() {
  kill -TERM "$exporter_pid"
  wait "$exporter_pid" || fail "exporter exited $? after SIGTERM"
}

# The OpenSSL libraries the exporter has mapped, by file name, one per line.
openssl_mapped() {
  awk '$6 ~ /\/lib(ssl|crypto)\.so/ { n = split($6, p, "/"); print p[n] }' "/proc/$exporter_pid/maps" |
    sort -u
}

expect_mapped() { # WHAT EXPECTED(one name per line, or empty)
  local mapped
  mapped=$(openssl_mapped)
  [[ $mapped == "$2" ]] || fail "$1: OpenSSL libraries mapped: '${mapped//$'\n'/ }', expected '${2//$'\n'/ }'"
  echo "$1: mapped: ${mapped:-none}"
}

# Plain HTTP, nothing to authenticate: a scrape and the probe endpoints' parsing run without
# OpenSSL.
start_exporter http
curl -fsS -o /dev/null "$url/metrics" || fail "plain scrape failed"
expect_mapped "plain HTTP, no secret" ""
stop_exporter

# A probe secret: libcrypto from the start, before any peer has asked for a proof.
printf 'e2e-shared-secret-0123456789\n' >"$work/secret"
chmod 600 "$work/secret"
start_exporter http --probe.secret-file="$work/secret"
expect_mapped "probe secret" "libcrypto.so.3"
stop_exporter

# Basic-auth users: libcrypto from the start; the right password passes, a wrong one does not.
hash=$(python3 -W ignore -c 'import crypt; print(crypt.crypt("s3cret", "$2b$04$abcdefghijklmnopqrstuu"))')
[[ $hash == '$2b$04$'* ]] || fail "python3's crypt made no bcrypt hash: $hash"
printf 'basic_auth_users:\n  prometheus: %s\n' "$hash" >"$work/web-auth.yml"
start_exporter http --web.config.file="$work/web-auth.yml"
expect_mapped "basic-auth users" "libcrypto.so.3"
status=$(curl -sS -o /dev/null -w '%{http_code}' -u prometheus:s3cret "$url/metrics")
[[ $status == 200 ]] || fail "the right password got $status"
status=$(curl -sS -o /dev/null -w '%{http_code}' -u prometheus:wrong "$url/metrics")
[[ $status == 401 ]] || fail "a wrong password got $status"
echo "basic-auth users: right password 200, wrong password 401"
stop_exporter

# TLS with basic-auth users: libssl joins, through the stand-in that holds the SSL_CTX set-up,
# after libcrypto was loaded for the passwords.
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
  -keyout "$work/server.key" -out "$work/server.crt" 2>/dev/null
printf 'tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  min_version: TLS13\n' \
  >"$work/web-tls.yml"
printf 'basic_auth_users:\n  prometheus: %s\n' "$hash" >>"$work/web-tls.yml"
start_exporter https --web.config.file="$work/web-tls.yml"
curl -fsS --cacert "$work/server.crt" -u prometheus:s3cret -o /dev/null \
  "https://localhost:$port/metrics" || fail "HTTPS scrape with the right password failed"
status=$(curl -sS --cacert "$work/server.crt" -u prometheus:wrong -o /dev/null -w '%{http_code}' \
  "https://localhost:$port/metrics")
[[ $status == 401 ]] || fail "a wrong password over HTTPS got $status"
# min_version is applied: a client held to TLS 1.2 is refused.
if curl -sS --cacert "$work/server.crt" --tls-max 1.2 -u prometheus:s3cret -o /dev/null \
  "https://localhost:$port/metrics" 2>/dev/null; then
  fail "a TLS 1.2 client was served although min_version is TLS13"
fi
expect_mapped "TLS" "libcrypto.so.3
libssl.so.3"
echo "TLS: HTTPS scrape served to the right password, 401 to a wrong one, a TLS 1.2 client refused"
stop_exporter
echo "PASS"

#!/bin/bash
# The probes core links without the verbs runtime: an executable that links only the core asks
# for neither libibverbs nor libnuma, directly (readelf's NEEDED entries) or through another
# library (ldd's resolution). The runtime's executable is the control and must ask for both.
# Usage: check_core_link.sh CORE_EXECUTABLE RUNTIME_EXECUTABLE
set -euo pipefail
core=$1
runtime=$2
verbs_libraries='lib(ibverbs|numa)\.so'

needed() { readelf -d "$1" | awk '/\(NEEDED\)/ { gsub(/[][]/, "", $5); print $5 }'; }

status=0
core_needed=$(needed "$core")
echo "NEEDED by $(basename "$core"):" $core_needed
if grep -E "$verbs_libraries" <<<"$core_needed"; then
  echo "FAIL: the core's executable needs a verbs library directly" >&2
  status=1
fi
if ldd "$core" | grep -E "$verbs_libraries"; then
  echo "FAIL: the core's executable loads a verbs library through another library" >&2
  status=1
fi
runtime_needed=$(needed "$runtime")
echo "NEEDED by $(basename "$runtime"):" $runtime_needed
for library in libibverbs libnuma; do
  if ! grep -q "^$library\.so" <<<"$runtime_needed"; then
    echo "FAIL: the runtime's executable does not need $library: the check cannot see it" >&2
    status=1
  fi
done
[ "$status" -eq 0 ] && echo "ok: the probes core links without libibverbs and libnuma"
exit "$status"

#!/bin/bash
#
# The lab a group of lab tests shares (ctest fixtures, tests/lab/CMakeLists.txt): `up` boots the
# lab that IBPROBE_LAB_SHARED names, after taking down what an interrupted run left in the same
# state directory; `down` takes it down. Each test of the group hands the lab on as it found it
# (lab-common.sh, lab_shared_release), and a test that fails takes it down, so that the next one
# boots a new one.
#
# Environment: see lab-common.sh.

set -euo pipefail
# shellcheck source=tests/lab/lab-common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lab-common.sh"

: "${IBPROBE_LAB_SHARED:?set IBPROBE_LAB_SHARED to the shared lab, e.g. 'two --forward 9470'}"
LAB_TEST_START_MS=$(now_ms)
case ${1:-} in
    up)
        [[ -x $LAB_SH ]] || fail "$LAB_SH not found"
        lab down >/dev/null 2>&1 || true
        # shellcheck disable=SC2086  # the lab's words
        lab_test_up $IBPROBE_LAB_SHARED
        lab status
        ;;
    down)
        lab down || fail "lab.sh down failed"
        note "the shared $IBPROBE_LAB_SHARED lab is down"
        ;;
    *)
        echo "usage: $0 up|down" >&2
        exit 2
        ;;
esac

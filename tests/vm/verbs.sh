#!/usr/bin/env bash
# Guest script: run one xfer-verbs integration test binary (providers/verbs/tests/*.rs)
# against the guest's rxe device. The test binary is built on the HOST (the guest
# cannot run cargo builds reliably) and passed as the first argument:
#   bins=$(tests/vm/build-verbs.sh --only VERBS)   # VERBS_RC=...
#   tests/vm/run-guest.sh tests/vm/verbs.sh "$(sed -n 's/^VERBS_RC=//p' <<<"$bins")"
# Extra arguments go to the test binary (e.g. a test name filter).
set -u

if [ "${XFER_IN_GUEST:-0}" != 1 ]; then
    echo "verbs.sh: run this inside the guest: tests/vm/run-guest.sh $0 TEST_BINARY" >&2
    exit 2
fi
if [ $# -lt 1 ] || [ ! -x "$1" ]; then
    echo "verbs.sh: usage: verbs.sh TEST_BINARY [ARGS...] (build it on the host: tests/vm/build-verbs.sh)" >&2
    exit 2
fi
bin=$1
shift

echo "=== xfer-verbs tests: $bin $*"
echo "device ${XFER_VERBS_DEVICE:-?} addr ${XFER_RDMA_ADDR:-?} RoCE v2 GID index ${RXE_GID_INDEX:-?}"
# One test at a time: each test connects two QPs over rdma_cm on the one device.
# XFER_IN_GUEST=1 (set by guest-init) makes a missing device a failure, not a skip.
timeout "${XFER_VERBS_TEST_TIMEOUT:-900}" "$bin" --test-threads=1 --nocapture "$@"
rc=$?
if [ "$rc" = 0 ]; then echo "verbs: PASS"; else echo "verbs: FAIL (rc $rc)"; fi
exit "$rc"

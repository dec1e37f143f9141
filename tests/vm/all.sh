#!/usr/bin/env bash
# Guest script: everything that needs the Soft-RoCE device, in ONE boot:
# smoke.sh (the stack itself), then verbs.sh (xfer-verbs tests).
#   bin=$(tests/vm/build-verbs.sh)
#   tests/vm/run-guest.sh tests/vm/all.sh "$bin"
# Runs every step even if one fails; exits nonzero if any failed.
set -u

if [ "${XFER_IN_GUEST:-0}" != 1 ]; then
    echo "all.sh: run this inside the guest: tests/vm/run-guest.sh $0 VERBS_TEST_BINARY" >&2
    exit 2
fi
if [ $# -lt 1 ]; then
    echo "all.sh: usage: all.sh VERBS_TEST_BINARY (from tests/vm/build-verbs.sh on the host)" >&2
    exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
failed=()

bash "$here/smoke.sh" || failed+=(smoke)
bash "$here/verbs.sh" "$@" || failed+=(verbs)

if [ ${#failed[@]} = 0 ]; then
    echo "=== all: PASS (smoke, verbs)"
else
    echo "=== all: FAIL: ${failed[*]}"
fi
[ ${#failed[@]} = 0 ]

#!/usr/bin/env bash
# verbs-path-cost.sh - user-space instructions per round trip of the verbs small-message
# path: examples/path_cost over XFER_PROVIDER=verbs on rxe0, under callgrind, in ONE
# Soft-RoCE guest run. For each PATH_COST binary given: one run counting
# `path_cost::measured*` (ITERS round trips, set-up and warm-up excluded) and one counting
# `path_cost::idle*` (ITERS polls that find nothing), then the counts split by object
# (bench/callgrind-objects.py: ours, rdma-core's libibverbs + librxe, libc, ...).
#
#   cargo build --release --example path_cost
#   tests/vm/run-guest.sh bench/verbs-path-cost.sh [ITERS] [SIZE] PATH_COST...
#
# XFER_PATH_COST_MODE=fadd counts one fetch-and-add round trip instead (path_cost's
# third argument; device atomics unless XFER_ATOMIC_MODE=cpu is set too).
#
# Runs INSIDE the guest (rxe0, set up by tests/vm/guest-init.sh); callgrind files are
# left in $XFER_VM_RESULTS (keep them with XFER_VM_RESULTS=DIR on the host).
set -uo pipefail

if [[ $# -lt 3 || ${XFER_IN_GUEST:-0} != 1 ]]; then
    echo "usage (inside the guest): $0 ITERS SIZE PATH_COST..." >&2
    echo "from the host: tests/vm/run-guest.sh $0 ITERS SIZE PATH_COST..." >&2
    exit 2
fi
ITERS=$1 SIZE=$2
shift 2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${XFER_VM_RESULTS:-$(mktemp -d /tmp/verbs-path-cost.XXXXXX)}
export XFER_PROVIDER=verbs
status=0
n=0
for bin in "$@"; do
    n=$((n + 1))
    for what in measured idle; do
        f=$OUT/cg.$n.$what.out
        echo "=== $bin ($what, $ITERS x $SIZE B)"
        if ! timeout -k 5 900 valgrind --tool=callgrind --toggle-collect="path_cost::$what*" \
            --callgrind-out-file="$f" "$bin" "$ITERS" "$SIZE" ${XFER_PATH_COST_MODE:-} 2>&1 | grep -E '^path_cost|Collected|rror'; then
            status=1
        fi
        python3 "$here/callgrind-objects.py" "$f" "$ITERS" || status=1
    done
done
exit $status

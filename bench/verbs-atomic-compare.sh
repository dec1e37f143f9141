#!/usr/bin/env bash
# verbs-atomic-compare.sh - in the Soft-RoCE guest: xfer-perf's atomic_lat,
# atomic_rate and atomic_rate_dc over verbs, with device atomics (the
# `auto` atomic mode there) and with XFER_ATOMIC_MODE=cpu, against
# ucx_perftest's ucp_fadd, ucp_cswap and ucp_add over rc_verbs (UCX_TLS
# rc_v,ud_v,self: ud_verbs only makes the wire-up), in one boot.
#
# usage (host): tests/vm/run-guest.sh bench/verbs-atomic-compare.sh XFER_PERF=PATH
#   (XFER_PERF from `tests/vm/build-verbs.sh --only XFER_PERF --locked`); the
#   report goes to $XFER_VM_RESULTS/atomic-compare.md and stdout. REPS (3),
#   LAT_ITERS (10000), RATE_ITERS (100000) as bench/atomic-compare.sh.

set -euo pipefail
cd "$(dirname "$0")/.."
for kv in "$@"; do export "${kv?}"; done
# ud_verbs on rxe: its RoCE destination GID check fails there (as in
# bench/verbs-compare.sh).
export UCX_NET_DEVICES="${XFER_VERBS_DEVICE:-rxe0}:1" UCX_UD_VERBS_ETH_DGID_CHECK=n
PROVIDERS="verbs verbs:cpu" UCX_TLSES=rc_v,ud_v,self PEER_ADDR="${XFER_RDMA_ADDR:-10.11.0.1}" \
    LAT_ITERS=${LAT_ITERS:-10000} RATE_ITERS=${RATE_ITERS:-100000} \
    bench/atomic-compare.sh --reps "${REPS:-3}" --out "${XFER_VM_RESULTS:-/tmp}/atomic-compare.md"

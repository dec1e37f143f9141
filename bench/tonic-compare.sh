#!/usr/bin/env bash
# tonic-compare.sh - tonic (gRPC) over xfer against tonic over tokio TCP on this
# host, in one run: the xfer-tonic bench example (one process, server and client
# on one tokio runtime) over xfer `tcp`, xfer `shm` and tokio TCP, alternated
# within each round; 64 B and 1 MiB payloads. Each row: unary calls one at a
# time (mean, p50, p99 latency, CPU per call), then 64 outstanding (calls/s,
# p50, p99); the medians over the rounds and each xfer transport's ratio to
# tokio TCP.
#
# usage: bench/tonic-compare.sh [--rounds N] [--transports tcp,shm,tokio] [--out FILE]
# environment: SMALL_CALLS (5000), BIG_CALLS (200), SECS (2)

set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3
transports=tcp,shm,tokio
out=
while [[ $# -gt 0 ]]; do
    case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --transports) transports=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
small=${SMALL_CALLS:-5000}
big=${BIG_CALLS:-200}
secs=${SECS:-2}

CARGO_INCREMENTAL=0 cargo build --locked --release -q -p xfer-tonic --example bench >&2
bench=${CARGO_TARGET_DIR:-target}/release/examples/bench
export XFER_TCP_ADDR=${XFER_TCP_ADDR:-127.0.0.1}

run() {
    echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# $bench --size 64 --calls $small --secs $secs --rounds $rounds --transports $transports"
    "$bench" --size 64 --calls "$small" --secs "$secs" --rounds "$rounds" --transports "$transports"
    echo
    echo "# $bench --size 1048576 --calls $big --secs $secs --rounds $rounds --transports $transports"
    "$bench" --size 1048576 --calls "$big" --secs "$secs" --rounds "$rounds" --transports "$transports"
    echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
}

if [[ -n $out ]]; then
    run | tee "$out"
else
    run
fi

#!/usr/bin/env bash
# think.sh - how the raw TCP floor's latency answers to user-space work per
# turnaround, next to xfer-perf in the same run (docs/PERFORMANCE.md, "What
# bounds the TCP latency ratio").
#
# The floor (tcp-floor) is run with --think NS on both sides: each side
# busy-waits NS nanoseconds between receiving a message and sending the next,
# the time a transport's own code takes per turnaround. xfer-perf tag_lat runs
# in the same repetition, so its figure can be placed on the floor's curve.
# Server pinned to SERVER_CPU (0), client to CLIENT_CPU (1), loopback only.
#
# usage: bench/think.sh [--reps N] [--size B] [--thinks LIST] [--out FILE]

set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPS=5
SIZE=64
THINKS=0,50,100,150,200
OUT=
while [[ $# -gt 0 ]]; do
    case "$1" in
        --reps) REPS=$2; shift 2 ;;
        --size) SIZE=$2; shift 2 ;;
        --thinks) THINKS=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) echo "think.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[[ "$REPS" =~ ^[1-9][0-9]*$ && "$SIZE" =~ ^[1-9][0-9]*$ && "$THINKS" =~ ^[0-9]+(,[0-9]+)*$ ]] \
    || { echo "think.sh: bad --reps, --size or --thinks" >&2; exit 2; }
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
ITERS=${LAT_ITERS:-20000}
export XFER_TCP_ADDR=${XFER_TCP_ADDR:-127.0.0.1}

cd "$ROOT"
cargo build --release --locked -q -p xfer-bench --bin tcp-floor
cargo build --release --locked -q --bin xfer-perf
FLOOR=$ROOT/target/release/tcp-floor
XPERF=$ROOT/target/release/xfer-perf
LOGS=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$LOGS"' EXIT

p50() { grep -o '"p50_us":[0-9.]*' | head -1 | cut -d: -f2; }

# Starts a server in the background, logging to $LOGS/srv; waits for its
# first line (the port or the endpoint name) and prints its last word.
serve() {
    : >"$LOGS/srv"
    timeout 120 taskset -c "$SERVER_CPU" "$@" >"$LOGS/srv" 2>&1 &
    for _ in $(seq 200); do
        [[ -s "$LOGS/srv" ]] && { head -1 "$LOGS/srv" | awk '{print $NF}'; return; }
        sleep 0.05
    done
    echo "think.sh: server did not start: $*" >&2
    exit 1
}

floor() { # think_ns
    local port
    port=$(serve "$FLOOR" --json --sizes "$SIZE" --iters "$ITERS" --think "$1" server --port 0)
    timeout 120 taskset -c "$CLIENT_CPU" "$FLOOR" --json --sizes "$SIZE" --iters "$ITERS" --think "$1" \
        client "127.0.0.1:$port" | p50
    wait
}

xfer() {
    local name
    name=$(serve "$XPERF" --json --test tag_lat --sizes "$SIZE" --iters "$ITERS" server)
    timeout 120 taskset -c "$CLIENT_CPU" "$XPERF" --json --test tag_lat --sizes "$SIZE" --iters "$ITERS" \
        client "$name" | p50
    wait
}

IFS=, read -r -a TS <<<"$THINKS"
declare -A ROWS
for r in $(seq "$REPS"); do
    line="| $r |"
    for t in "${TS[@]}"; do
        line+=" $(floor "$t") |"
    done
    line+=" $(xfer) |"
    ROWS[$r]=$line
    echo "[think] repetition $r: $line" >&2
done

{
    echo "# tcp-floor with busy work per turnaround, and xfer-perf ($SIZE B, p50 half round trip, µs)"
    echo
    echo "Command: \`bench/think.sh --reps $REPS --size $SIZE --thinks $THINKS\` ($(date -u +%Y-%m-%d), $(nproc) CPUs, server on CPU $SERVER_CPU, client on CPU $CLIENT_CPU, $ITERS iterations)"
    echo
    head="| rep |"; sep="|---|"
    for t in "${TS[@]}"; do head+=" floor +${t} ns |"; sep+="---|"; done
    echo "$head xfer-perf tag_lat |"
    echo "$sep---|"
    for r in $(seq "$REPS"); do echo "${ROWS[$r]}"; done
} | tee ${OUT:+"$OUT"}

#!/usr/bin/env bash
# sensitivity.sh - how the raw TCP floor's latency answers to what a library
# adds around it, next to xfer-perf in the same run (docs/PERFORMANCE.md,
# "What bounds the TCP latency ratio" and "Call depth across the `recv`").
#
# The floor (tcp-floor) runs on both sides with
#   --think NS   busy-waiting NS nanoseconds between receiving a message and
#                sending the next: a transport's own code per turnaround;
#   --frames N   waiting for each message N nested function calls deep: a
#                library's call depth around its `recv`.
# xfer-perf tag_lat runs in the same repetition, so its figure can be placed
# among the floor's. Server pinned to SERVER_CPU (0), client to CLIENT_CPU (1),
# loopback only.
#
# usage: bench/sensitivity.sh [--reps N] [--size B] [--thinks LIST] [--frames LIST] [--out FILE]

set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPS=5
SIZE=64
THINKS=0,50,100,150,200
FRAMES=2,4,6
OUT=
while [[ $# -gt 0 ]]; do
    case "$1" in
        --reps) REPS=$2; shift 2 ;;
        --size) SIZE=$2; shift 2 ;;
        --thinks) THINKS=$2; shift 2 ;;
        --frames) FRAMES=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
        *) echo "sensitivity.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[[ "$REPS" =~ ^[1-9][0-9]*$ && "$SIZE" =~ ^[1-9][0-9]*$ && "$THINKS" =~ ^[0-9]+(,[0-9]+)*$ \
   && "$FRAMES" =~ ^([0-9]+(,[0-9]+)*)?$ ]] \
    || { echo "sensitivity.sh: bad --reps, --size, --thinks or --frames" >&2; exit 2; }
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
ITERS=${LAT_ITERS:-20000}
export XFER_TCP_ADDR=${XFER_TCP_ADDR:-127.0.0.1}
# Against a TCP floor: TCP alone (the default, shm+tcp, would use shared memory here).
export XFER_PROVIDER=${XFER_PROVIDER:-tcp}

cd "$ROOT"
cargo build --release --locked -q -p xfer-bench --bin tcp-floor
cargo build --release --locked -q --bin xfer-perf
FLOOR=$ROOT/target/release/tcp-floor
XPERF=$ROOT/target/release/xfer-perf
LOGS=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$LOGS"' EXIT

p50() { grep -o '"p50_us":[0-9.]*' | head -1 | cut -d: -f2; }

# Starts a server as a job of this shell, logging to $LOGS/srv; waits for its
# first whole line (the port or the endpoint name) and sets READY to its last
# word. Called in the same shell as the client and the `wait` after it (not in
# a command substitution of its own, whose job the caller could not wait for).
serve() {
    : >"$LOGS/srv"
    timeout 120 taskset -c "$SERVER_CPU" "$@" >"$LOGS/srv" 2>&1 &
    for _ in $(seq 200); do
        if [[ $(wc -l <"$LOGS/srv") -ge 1 ]]; then
            READY=$(head -1 "$LOGS/srv" | awk '{print $NF}')
            return
        fi
        sleep 0.05
    done
    echo "sensitivity.sh: server did not start: $*" >&2
    exit 1
}

floor() { # tcp-floor options for both sides
    serve "$FLOOR" --json --sizes "$SIZE" --iters "$ITERS" "$@" server --port 0
    timeout 120 taskset -c "$CLIENT_CPU" "$FLOOR" --json --sizes "$SIZE" --iters "$ITERS" "$@" \
        client "127.0.0.1:$READY" | p50
    wait
}

xfer() {
    serve "$XPERF" --json --test tag_lat --sizes "$SIZE" --iters "$ITERS" server
    timeout 120 taskset -c "$CLIENT_CPU" "$XPERF" --json --test tag_lat --sizes "$SIZE" --iters "$ITERS" \
        client "$READY" | p50
    wait
}

IFS=, read -r -a TS <<<"$THINKS"
IFS=, read -r -a FS <<<"$FRAMES"
declare -A ROWS
for r in $(seq "$REPS"); do
    line="| $r |"
    for t in "${TS[@]}"; do
        line+=" $(floor --think "$t") |"
    done
    for f in "${FS[@]}"; do
        line+=" $(floor --frames "$f") |"
    done
    line+=" $(xfer) |"
    ROWS[$r]=$line
    echo "[sensitivity] repetition $r: $line" >&2
done

{
    echo "# tcp-floor with work per turnaround or call depth added, and xfer-perf ($SIZE B, p50 half round trip, µs)"
    echo
    echo "Command: \`bench/sensitivity.sh --reps $REPS --size $SIZE --thinks $THINKS --frames $FRAMES\` ($(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(nproc) CPUs, server on CPU $SERVER_CPU, client on CPU $CLIENT_CPU, $ITERS iterations)"
    echo
    head="| rep |"; sep="|---|"
    for t in "${TS[@]}"; do head+=" floor +${t} ns |"; sep+="---|"; done
    for f in "${FS[@]}"; do head+=" floor ${f} frames |"; sep+="---|"; done
    echo "$head xfer-perf tag_lat |"
    echo "$sep---|"
    for r in $(seq "$REPS"); do echo "${ROWS[$r]}"; done
} | tee ${OUT:+"$OUT"}

#!/usr/bin/env bash
# shm-rma.sh - RMA over shared memory: two xfer-perf builds (e.g. main and a branch)
# alternated in one run, and ucx_perftest's ucp_put_lat / ucp_get / ucp_put_bw with UCX's
# defaults, two processes on this host, server pinned to CPU $SERVER_CPU, client to
# $CLIENT_CPU.
#
# Rows: put_lat, get_lat (avg and p50, µs), put_bw (MiB/s) at 8 B, 64 KiB and 1 MiB.
# xfer-perf's put_lat is a ping-pong of writes with immediate data (half a round trip),
# get_lat one read's round trip; ucx_perftest's ucp_put_lat is a ping-pong of puts
# polled in memory, ucp_get one get's round trip.
#
# usage: bench/shm-rma.sh [--reps N] BEFORE_XFER_PERF AFTER_XFER_PERF
# environment: XFER_PROVIDER (shm), SERVER_CPU (0), CLIENT_CPU (1)
# Prints one tab-separated line per measurement: build, test, size, field, value.

set -euo pipefail
reps=3
if [[ ${1:-} == --reps ]]; then reps=$2; shift 2; fi
[[ $# == 2 ]] || { sed -n '2,14p' "$0"; exit 2; }
builds=("$1" "$2")
names=(before after)
s_cpu=${SERVER_CPU:-0}
c_cpu=${CLIENT_CPU:-1}
provider=${XFER_PROVIDER:-shm}
port=$((20000 + RANDOM % 10000))
slog=$(mktemp /tmp/shm-rma.XXXXXX)
trap 'rm -f "$slog"' EXIT

# xfer BUILD: every test and size of one build, as JSON lines.
xfer() {
    local name= pid
    XFER_PROVIDER=$provider taskset -c "$s_cpu" "$1" --json server >"$slog" 2>&1 &
    pid=$!
    for _ in $(seq 200); do
        name=$(awk '/^xfer-perf server:/ { print $3; exit }' "$slog")
        [[ -n $name ]] && break
        sleep 0.05
    done
    XFER_PROVIDER=$provider timeout 300 taskset -c "$c_cpu" "$1" --json --test put_lat,get_lat,put_bw \
        --sizes 8,64k,1M client "$name" 2>/dev/null | grep '^{' || true
    wait "$pid" 2>/dev/null || true
}

# ucx TEST SIZE ITERS: ucx_perftest's final line (-f), defaults (no UCX_TLS).
ucx() {
    local srv
    port=$((port + 1))
    taskset -c "$s_cpu" ucx_perftest -p "$port" >/dev/null 2>&1 &
    srv=$!
    for _ in $(seq 100); do
        if out=$(timeout 300 taskset -c "$c_cpu" ucx_perftest 127.0.0.1 -p "$port" -t "$1" -s "$2" -n "$3" -f 2>/dev/null); then
            wait "$srv" || true
            tail -n 1 <<<"$out"
            return
        fi
        sleep 0.1
    done
    kill "$srv" 2>/dev/null || true
}

for r in $(seq "$reps"); do
    for b in 0 1; do
        xfer "${builds[$b]}" | while read -r line; do
            t=$(sed -n 's/.*"test":"\([a-z_]*\)".*/\1/p' <<<"$line")
            s=$(sed -n 's/.*"size":\([0-9]*\).*/\1/p' <<<"$line")
            for f in avg_us p50_us mib_s; do
                v=$(sed -n "s/.*\"$f\":\([0-9.]*\).*/\1/p" <<<"$line")
                [[ -n $v ]] && printf '%s\t%s\t%s\t%s\t%s\n' "${names[$b]}" "$t" "$s" "$f" "$v"
            done
        done
    done
    if command -v ucx_perftest >/dev/null; then
        for s in 8 65536 1048576; do
            n=$((s >= 1048576 ? 1000 : 10000))
            # -f: iterations, typical (p50), average, overall latency (µs), bandwidth
            # average and overall (MB/s, 2^20), message rate average and overall.
            l=$(ucx ucp_put_lat "$s" "$n")
            printf 'ucx\tput_lat\t%s\tp50_us\t%s\nucx\tput_lat\t%s\tavg_us\t%s\n' "$s" "$(awk '{print $2}' <<<"$l")" "$s" "$(awk '{print $4}' <<<"$l")"
            l=$(ucx ucp_get "$s" "$n")
            printf 'ucx\tget_lat\t%s\tp50_us\t%s\nucx\tget_lat\t%s\tavg_us\t%s\n' "$s" "$(awk '{print $2}' <<<"$l")" "$s" "$(awk '{print $4}' <<<"$l")"
            l=$(ucx ucp_put_bw "$s" "$n")
            printf 'ucx\tput_bw\t%s\tmib_s\t%s\n' "$s" "$(awk '{print $6}' <<<"$l")"
        done
    fi
done

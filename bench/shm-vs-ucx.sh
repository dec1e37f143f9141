#!/usr/bin/env bash
# shm-vs-ucx.sh - the same-host machinery (xfer-shm) against UCX shared memory, in one run.
#
# Latency: ring_pingpong (xfer-shm rings, busy polling; half round trip) against
# `ucx_perftest -t tag_lat`. Bandwidth: rma_bw (xfer-shm RMA write and read, by CMA and
# through the ring, window 4) against `ucx_perftest -t ucp_put_bw` and `-t tag_bw`; and
# the median time of one large transfer: rma_bw at window 1 (post to completion) against
# the 50th percentile of `tag_lat` at that size (half a round trip). UCX
# runs with its defaults and with UCX_TLS=sm, posix, and posix,cma (cma alone has no
# active-message transport: UCX answers "Destination is unreachable"). Every server or
# first process is pinned to CPU 0, every client or peer to CPU 1; the tools alternate
# within each row. UCX bandwidth is its "overall" column (MB = 2^20 bytes), latency its
# 50th percentile and "overall" average, as ring_pingpong's p50 and average.
#
# usage: bench/shm-vs-ucx.sh [--reps N]      (environment: LAT_ITERS, SERVER_CPU, CLIENT_CPU)

set -euo pipefail
cd "$(dirname "$0")/.."

reps=1
[[ ${1:-} == --reps ]] && reps=$2
lat_iters=${LAT_ITERS:-200000}
s_cpu=${SERVER_CPU:-0}
c_cpu=${CLIENT_CPU:-1}
command -v ucx_perftest >/dev/null || { echo "ucx_perftest not found (apt-get install ucx-utils)" >&2; exit 2; }

CARGO_INCREMENTAL=0 cargo build --locked --release -q -p xfer-shm --examples
ex=target/release/examples
port=$((14000 + RANDOM % 1000))

# ucx TLS TEST SIZE ITERS: the final line of a client run against a fresh server, on
# $port (the caller moves it on: this runs inside $(...), whose assignments are lost).
ucx() {
    local tls=$1 test=$2 size=$3 n=$4 out srv
    if [[ $tls == default ]]; then tls=; fi
    env ${tls:+UCX_TLS=$tls} taskset -c "$s_cpu" ucx_perftest -p "$port" >/dev/null 2>&1 &
    srv=$!
    # The client fails at once while the server is not listening yet: retry, bounded.
    for _ in $(seq 100); do
        if out=$(env ${tls:+UCX_TLS=$tls} taskset -c "$c_cpu" ucx_perftest 127.0.0.1 -p "$port" \
            -t "$test" -s "$size" -n "$n" -f 2>/dev/null); then
            wait "$srv" || true
            echo "$out" | tail -n 1
            return
        fi
        kill -0 "$srv" 2>/dev/null || break
        sleep 0.1
    done
    kill "$srv" 2>/dev/null || true
    wait "$srv" 2>/dev/null || true
    echo "failed"
}

# iters BASE SIZE: BASE operations at 64 KiB, scaled to SIZE bytes; at least 200.
iters() {
    local n=$(($1 * 65536 / $2))
    echo $((n < 200 ? 200 : n))
}

# rma_cells SIZE ITERS PICK [ARGS...]: appends to $row a cell for each rma_bw run (write,
# then read, each by CMA and through the ring), the figure the sed script PICK takes from
# its output.
rma_cells() {
    local size=$1 n=$2 pick=$3 args line
    shift 3
    for args in "--op write" "--op write --copy" "--op read" "--op read --copy"; do
        # shellcheck disable=SC2086
        line=$($ex/rma_bw $args --size "$size" --iters "$n" "$@" --cpus "$s_cpu,$c_cpu")
        row+=" $(sed -n "$pick" <<<"$line") |"
    done
}

# ucx_cells TEST SIZE ITERS FORMAT: appends to $row a cell for each UCX_TLS setting, the
# figure the awk program FORMAT (with s set to SIZE) takes from the client's final line.
ucx_cells() {
    local test=$1 size=$2 n=$3 format=$4 tls f
    for tls in default sm posix posix,cma; do
        port=$((port + 1))
        f=$(ucx "$tls" "$test" "$size" "$n")
        row+=" $(awk -v s="$size" "$format" <<<"$f") |"
    done
}

echo "## Latency (8 B and 4 KiB, $lat_iters round trips, CPUs $s_cpu,$c_cpu)"
echo
echo "| size | run | xfer-shm rings p50 / avg (µs) | UCX default | UCX sm | UCX posix | UCX posix,cma |"
echo "|---|---|---|---|---|---|---|"
for size in 8 4096; do
    for r in $(seq "$reps"); do
        line=$($ex/ring_pingpong --iters "$lat_iters" --size "$size" --cpus "$s_cpu,$c_cpu")
        p50=$(sed -n 's/.* p50 \([0-9.]*\) us.*/\1/p' <<<"$line")
        avg=$(sed -n 's/.* avg \([0-9.]*\) us.*/\1/p' <<<"$line")
        row="| $size B | $r | $p50 / $avg |"
        ucx_cells tag_lat "$size" "$lat_iters" '{ if (NF >= 4) printf "%s / %s", $2, $4; else print "failed" }'
        echo "$row"
    done
done
echo
echo "## Bandwidth (MB/s, MB = 2^20 bytes)"
echo
echo "| size | run | xfer-shm RMA write CMA | write ring | read CMA | read ring | UCX ucp_put_bw default | sm | posix | posix,cma | UCX tag_bw default | sm | posix | posix,cma |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for size in 65536 1048576 4194304; do
    n=$(iters 4000 "$size")
    for r in $(seq "$reps"); do
        row="| $size | $r |"
        rma_cells "$size" "$n" 's/.*: \([0-9.]*\) MB\/s.*/\1/p'
        for test in ucp_put_bw tag_bw; do
            ucx_cells "$test" "$size" "$n" '{ if (NF >= 6) print $6; else print "failed" }'
        done
        echo "$row"
    done
done
echo
echo "## Median time of one transfer (µs; in brackets MB/s at that time)"
echo
echo "| size | run | xfer-shm RMA write CMA | write ring | read CMA | read ring | UCX tag_lat p50 default | sm | posix | posix,cma |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for size in 65536 1048576 4194304; do
    n=$(iters 2000 "$size")
    for r in $(seq "$reps"); do
        row="| $size | $r |"
        rma_cells "$size" "$n" 's/.*median operation \([0-9.]*\) us (\([0-9.]*\) MB.*/\1 (\2)/p' --window 1
        ucx_cells tag_lat "$size" "$n" '{ if (NF >= 4) printf "%s (%.1f)", $2, s / $2 / 1.048576; else print "failed" }'
        echo "$row"
    done
done

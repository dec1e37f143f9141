#!/usr/bin/env bash
# verbs-ab.sh - two builds of xfer-perf over verbs in ONE Soft-RoCE guest run, interleaved:
# 8 B tag_lat and 64 KiB tag_bw, server pinned to CPU 0, client to CPU 1, REPS rounds of
# A then B. Prints every result line and the median of each build's runs, and B/A.
# TCG timings move between boots; within one boot, interleaved, the ratio holds.
#
#   tests/vm/run-guest.sh bench/verbs-ab.sh A_XFER_PERF B_XFER_PERF [REPS]
#
# Runs INSIDE the guest (rxe0 at 10.11.0.1, set up by tests/vm/guest-init.sh).
set -uo pipefail

if [[ $# -lt 2 || ${XFER_IN_GUEST:-0} != 1 ]]; then
    echo "usage (inside the guest): $0 A_XFER_PERF B_XFER_PERF [REPS]" >&2
    echo "from the host: tests/vm/run-guest.sh $0 A B [REPS]" >&2
    exit 2
fi
A=$1 B=$2 REPS=${3:-3}
OUT=$(mktemp -d /tmp/verbs-ab.XXXXXX)
export XFER_PROVIDER=verbs

# One measurement: server and client of build $1, xfer-perf options after it.
measure() { # bin label test size iters
    local bin=$1 label=$2 test=$3 size=$4 iters=$5 slog name
    slog=$OUT/$label-$test-server.log
    timeout -k 5 300 taskset -c 0 "$bin" --test "$test" --sizes "$size" --iters "$iters" --json server >"$slog" 2>&1 &
    local pid=$!
    for _ in $(seq 600); do
        name=$(awk '/^xfer-perf server:/ { print $3; exit }' "$slog")
        [[ -n $name ]] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if [[ -z $name ]]; then
        echo "$label $test: the server printed no name" >&2
        cat "$slog" >&2
        return 1
    fi
    timeout -k 5 300 taskset -c 1 "$bin" --test "$test" --sizes "$size" --iters "$iters" --json client "$name" |
        sed "s/^{/{\"build\":\"$label\",/" | tee -a "$OUT/results.jsonl"
    wait "$pid"
}

status=0
for rep in $(seq "$REPS"); do
    for pair in "A:$A" "B:$B"; do
        label=${pair%%:*} bin=${pair#*:}
        measure "$bin" "$label" tag_lat 8 10000 || status=1
        measure "$bin" "$label" tag_bw 65536 1000 || status=1
    done
done

python3 - "$OUT/results.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def med(build, test, key):
    v = [r[key] for r in rows if r["build"] == build and r["test"] == test and key in r]
    return statistics.median(v) if v else None
print("\nmedians over the runs (B/A):")
for test, keys in (("tag_lat", ("avg_us", "p50_us")), ("tag_bw", ("mib_s", "msg_rate"))):
    for k in keys:
        a, b = med("A", test, k), med("B", test, k)
        if a and b:
            print(f"  {test:8} {k:7} A {a:10.2f}  B {b:10.2f}  B/A {b / a:.3f}")
        else:
            print(f"  {test:8} {k:7} missing (A {a}, B {b})")
EOF
exit $status

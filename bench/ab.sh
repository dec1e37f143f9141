#!/usr/bin/env bash
# A/B latency of two xfer-perf builds: tag_lat p50 over one provider, the
# server pinned to CPU 0 and the client to CPU 1, the two builds alternated
# within each repetition (the order flipped every repetition), then per size
# the median p50 of each, its min-max, and the median of the paired ratios
# (B/A within a repetition). For a change to the data path, on a machine
# whose load drifts: read the paired ratio.
#
#   bench/ab.sh A_BIN B_BIN                # 5 reps, 8 and 64 B, 40000 iterations
#   REPS=7 SIZES=8,64,4k ITERS=20000 XFER_PROVIDER=shm bench/ab.sh A_BIN B_BIN
#
# Build the two binaries first (cargo build --release --bin xfer-perf, copied
# aside for each tree). JSON lines of every run go to $OUT (default
# ab.jsonl in a temporary directory, named at the end).
set -euo pipefail

a=${1:?usage: bench/ab.sh A_BIN B_BIN}
b=${2:?usage: bench/ab.sh A_BIN B_BIN}
reps=${REPS:-5}
sizes=${SIZES:-8,64}
iters=${ITERS:-40000}
provider=${XFER_PROVIDER:-tcp}
out=${OUT:-$(mktemp -d)/ab.jsonl}
: >"$out"

# run LABEL BIN REP: one server and one client run of BIN.
run() {
    local log srv name=""
    log=$(mktemp)
    XFER_PROVIDER=$provider XFER_TCP_ADDR=127.0.0.1 taskset -c 0 "$2" server >"$log" 2>&1 &
    srv=$!
    for _ in $(seq 200); do
        name=$(sed -n 's/^xfer-perf server: //p' "$log")
        [ -n "$name" ] && break
        sleep 0.05
    done
    [ -n "$name" ] || { echo "ab: $2 server did not start: $(cat "$log")" >&2; kill "$srv"; exit 1; }
    XFER_PROVIDER=$provider XFER_TCP_ADDR=127.0.0.1 taskset -c 1 "$2" --json --test tag_lat \
        --sizes "$sizes" --iters "$iters" client "$name" |
        sed "s/^{/{\"label\":\"$1\",\"rep\":$3,/" >>"$out"
    wait "$srv"
    rm -f "$log"
}

for r in $(seq "$reps"); do
    if ((r % 2)); then
        run A "$a" "$r"
        run B "$b" "$r"
    else
        run B "$b" "$r"
        run A "$a" "$r"
    fi
done

python3 - "$out" <<'EOF'
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| size | A p50 (median, min-max) | B p50 (median, min-max) | B/A paired (median, min-max) |")
print("|---:|---|---|---|")
for size in sorted({r["size"] for r in rows}):
    p = {(r["label"], r["rep"]): r["p50_us"] for r in rows if r["size"] == size}
    a = [v for (l, _), v in p.items() if l == "A"]
    b = [v for (l, _), v in p.items() if l == "B"]
    ratio = [p[("B", k)] / p[("A", k)] for (l, k) in p if l == "A" and ("B", k) in p]
    cell = lambda v, f: f"{f(st.median(v))} ({f(min(v))}-{f(max(v))})"
    us = lambda x: f"{x:.2f} us"
    x = lambda x: f"{x:.3f}"
    print(f"| {size} B | {cell(a, us)} | {cell(b, us)} | {cell(ratio, x)} |")
EOF
echo "ab: runs in $out"

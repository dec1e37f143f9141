#!/usr/bin/env bash
# A/B of two xfer-perf builds: tag_lat p50 (or, with TEST=tag_rate, the
# message rate) over one provider, the server pinned to CPU 0 and the client
# to CPU 1, the two builds alternated within each repetition (the order
# flipped every repetition), then per size the median of each, its min-max,
# and the median of the paired ratios (B/A within a repetition). For a change
# to the data path, on a machine whose load drifts: read the paired ratio.
# Each repetition starts with bench/line-floor.c's one-way cache-line time
# (p50, ns), which tells the host's regime (~60 ns or ~250 ns here): compare
# repetitions of one regime only.
#
#   bench/ab.sh A_BIN B_BIN                # 5 reps, 8 and 64 B, 40000 iterations
#   REPS=7 SIZES=8,64,4k ITERS=20000 XFER_PROVIDER=shm bench/ab.sh A_BIN B_BIN
#   TEST=tag_rate SIZES=8 ITERS=400000 XFER_PROVIDER=shm bench/ab.sh A_BIN B_BIN
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
test=${TEST:-tag_lat}
provider=${XFER_PROVIDER:-tcp}
case $test in
tag_lat) metric=p50_us ;;
tag_rate) metric=msg_rate ;;
*) echo "ab: TEST is tag_lat or tag_rate" >&2; exit 2 ;;
esac
floor=$(mktemp)
cc -O2 -pthread -o "$floor" "$(dirname "$0")/line-floor.c"
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
    XFER_PROVIDER=$provider XFER_TCP_ADDR=127.0.0.1 taskset -c 1 "$2" --json --test "$test" \
        --sizes "$sizes" --iters "$iters" client "$name" |
        sed "s/^{/{\"label\":\"$1\",\"rep\":$3,/" >>"$out"
    wait "$srv"
    rm -f "$log"
}

for r in $(seq "$reps"); do
    echo "ab: repetition $r: line floor $("$floor" | grep -o 'p50 [0-9.]*') ns" >&2
    if ((r % 2)); then
        run A "$a" "$r"
        run B "$b" "$r"
    else
        run B "$b" "$r"
        run A "$a" "$r"
    fi
done

rm -f "$floor"
python3 - "$out" "$metric" <<'EOF'
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
m = sys.argv[2]
print(f"| size | A {m} (median, min-max) | B {m} (median, min-max) | B/A paired (median, min-max) |")
print("|---:|---|---|---|")
for size in sorted({r["size"] for r in rows}):
    p = {(r["label"], r["rep"]): r[m] for r in rows if r["size"] == size}
    a = [v for (l, _), v in p.items() if l == "A"]
    b = [v for (l, _), v in p.items() if l == "B"]
    ratio = [p[("B", k)] / p[("A", k)] for (l, k) in p if l == "A" and ("B", k) in p]
    cell = lambda v, f: f"{f(st.median(v))} ({f(min(v))}-{f(max(v))})"
    us = (lambda x: f"{x:.3f} us") if m == "p50_us" else (lambda x: f"{x / 1e6:.2f} M/s")
    x = lambda x: f"{x:.3f}"
    print(f"| {size} B | {cell(a, us)} | {cell(b, us)} | {cell(ratio, x)} |")
EOF
echo "ab: runs in $out"

#!/usr/bin/env bash
# verbs-rdm-compare.sh - xfer-perf over `verbs-rdm` (verbs under core's RDM engine)
# against the `verbs` provider, in the same Soft-RoCE guest boot, interleaved:
# tag_lat 8 B (p50) and tag_bw 1 MiB, and RMA: get_lat 8 B and 64 KiB (p50), put_bw and
# get_bw 1 MiB (verbs-rdm does them by RDMA READ/WRITE once the target granted the
# key: after the first window), server pinned to CPU 0, client to CPU 1.
# One JSON line per run on stdout, then a Markdown table.
#
#   tests/vm/run-guest.sh bench/verbs-rdm-compare.sh $(tests/vm/build-verbs.sh --only XFER_PERF --locked)
#
# Knobs: REPS (3), LAT_ITERS (5000), BW_ITERS (200), RMA (1; 0 leaves the RMA tests out).
set -u
if [ "${XFER_IN_GUEST:-0}" != 1 ]; then
    echo "verbs-rdm-compare: run this inside the guest (tests/vm/run-guest.sh $0 XFER_PERF=PATH)" >&2
    exit 2
fi
perf=
for arg in "$@"; do
    case $arg in
    XFER_PERF=*) perf=${arg#XFER_PERF=} ;;
    *) ;; # the other KEY=PATH lines of build-verbs.sh
    esac
done
[ -x "$perf" ] || { echo "verbs-rdm-compare: no XFER_PERF=PATH argument" >&2; exit 2; }
reps=${REPS:-3}
lat_iters=${LAT_ITERS:-5000}
bw_iters=${BW_ITERS:-200}
out=$(mktemp -d)
status=0

# run PROVIDER TEST SIZE ITERS: one server/client pair; the client's JSON line.
run() {
    local provider=$1 test=$2 size=$3 iters=$4 slog=$out/server clog=$out/client name i
    local opts=(--json --test "$test" --sizes "$size" --iters "$iters" --warmup $((iters / 10)))
    XFER_PROVIDER=$provider timeout -k 5 120 taskset -c 0 "$perf" "${opts[@]}" server >"$slog" 2>&1 &
    local pid=$!
    for i in $(seq 1 300); do
        name=$(awk '/^xfer-perf server:/ { print $3; exit }' "$slog")
        [ -n "$name" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$name" ]; then
        echo "verbs-rdm-compare: $provider server did not start: $(tail -n 3 "$slog")" >&2
        status=1
        kill "$pid" 2>/dev/null
        return
    fi
    if ! XFER_PROVIDER=$provider timeout -k 5 120 taskset -c 1 "$perf" "${opts[@]}" client "$name" >"$clog" 2>&1; then
        echo "verbs-rdm-compare: $provider $test client failed: $(tail -n 3 "$clog")" >&2
        status=1
    fi
    wait "$pid" 2>/dev/null
    grep '^{' "$clog"
}

results=$out/results
for rep in $(seq 1 "$reps"); do
    for p in verbs verbs-rdm; do
        run "$p" tag_lat 8 "$lat_iters" | tee -a "$results"
        run "$p" tag_bw 1048576 "$bw_iters" | tee -a "$results"
        if [ "${RMA:-1}" = 1 ]; then
            run "$p" get_lat 8 "$lat_iters" | tee -a "$results"
            run "$p" get_lat 65536 "$bw_iters" | tee -a "$results"
            run "$p" put_bw 1048576 "$bw_iters" | tee -a "$results"
            run "$p" get_bw 1048576 "$bw_iters" | tee -a "$results"
        fi
    done
done
python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def med(p, t, k, size=None):
    v = [r[k] for r in rows if r["provider"] == p and r["test"] == t and (size is None or r.get("size") == size)]
    return statistics.median(v) if v else float("nan")
print("\n| measure | verbs | verbs-rdm | verbs-rdm/verbs |\n|---|---|---|---|")
for t, k, size, name in [
    ("tag_lat", "p50_us", None, "tag_lat 8 B p50 µs"),
    ("tag_bw", "mib_s", None, "tag_bw 1 MiB MiB/s"),
    ("get_lat", "p50_us", 8, "get_lat 8 B p50 µs"),
    ("get_lat", "p50_us", 65536, "get_lat 64 KiB p50 µs"),
    ("put_bw", "mib_s", None, "put_bw 1 MiB MiB/s"),
    ("get_bw", "mib_s", None, "get_bw 1 MiB MiB/s"),
]:
    a, b = med("verbs", t, k, size), med("verbs-rdm", t, k, size)
    if a != a and b != b:
        continue
    print(f"| {name} | {a:.1f} | {b:.1f} | {b / a:.2f} |")
PY
rm -rf "$out"
exit $status

#!/usr/bin/env bash
# verbs-lat-ab.sh - 8 B latency of two xfer-perf builds over verbs against UCX and
# perftest in ONE Soft-RoCE guest run, paired: each repetition runs, seconds apart,
#   xfer A, xfer B        xfer-perf --test tag_lat --sizes 8 (XFER_PROVIDER=verbs)
#   ucx rc_v              ucx_perftest -t tag_lat -s 8, UCX_TLS=rc_v,self (forced rc_verbs)
#   ucx default           ucx_perftest with UCX's own transport choice (no UCX_TLS; only
#                         UCX_NET_DEVICES=rxe0:1 and the RoCE DGID check off, without
#                         which UCX aborts on rxe over dummy0)
#   ib_send_lat           ib_send_lat -s 8, and with -I 8 (inline, as xfer and UCX send)
# then prints every run's p50 and average (half a round trip, µs), each repetition's
# ratios of A and B to UCX rc_v and ib_send_lat, and their medians.
#
#   tests/vm/run-guest.sh bench/verbs-lat-ab.sh A_XFER_PERF B_XFER_PERF [REPS] [ITERS]
#
# Runs INSIDE the guest (rxe0 at 10.11.0.1, set up by tests/vm/guest-init.sh). Servers
# on CPU 0, clients on CPU 1. A failed run is reported as such and left out. Raw logs
# in $XFER_VM_RESULTS/verbs-lat-ab.PID (keep them with XFER_VM_RESULTS=DIR on the host).
set -uo pipefail

if [[ $# -lt 2 || ${XFER_IN_GUEST:-0} != 1 ]]; then
    echo "usage (inside the guest): $0 A_XFER_PERF B_XFER_PERF [REPS] [ITERS]" >&2
    echo "from the host: tests/vm/run-guest.sh $0 A B [REPS] [ITERS]" >&2
    exit 2
fi
A=$1 B=$2 REPS=${3:-3} ITERS=${4:-10000}
DEV=${XFER_VERBS_DEVICE:-rxe0} ADDR=${XFER_RDMA_ADDR:-10.11.0.1} GID=${RXE_GID_INDEX:-1}
OUT=${XFER_VM_RESULTS:-/tmp}/verbs-lat-ab.$$
mkdir -p "$OUT"
ROWS=$OUT/rows.tsv
PORT=18515
status=0
export XFER_PROVIDER=verbs
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Waits (bounded) until something listens on TCP port $1 (server pid $2).
listening() {
    local hex
    hex=$(printf '%04X' "$1")
    for _ in $(seq 300); do
        grep -q ":$hex [0-9A-F:]* 0A " /proc/net/tcp 2>/dev/null && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# row: tool rep p50 avg (or "fail")
row() { printf '%s\t%s\t%s\t%s\n' "$@" >>"$ROWS"; echo "$*"; }

xfer() { # label bin rep
    local label=$1 bin=$2 rep=$3 line
    local opts=(--test tag_lat --sizes 8 --iters "$ITERS" --warmup 1000)
    if ! xfer_server "$OUT/$label-$rep.server" timeout -k 5 300 taskset -c 0 "$bin" "${opts[@]}"; then
        row "$label" "$rep" fail fail
        status=1
        return
    fi
    line=$(timeout -k 5 300 taskset -c 1 "$bin" "${opts[@]}" --json client "$XFER_SERVER_NAME" 2>&1 | grep '^{')
    wait "$XFER_SERVER_PID"
    if [[ -z $line ]]; then
        row "$label" "$rep" fail fail
        status=1
        return
    fi
    row "$label" "$rep" "$(sed 's/.*"p50_us":\([0-9.]*\).*/\1/' <<<"$line")" "$(sed 's/.*"avg_us":\([0-9.]*\).*/\1/' <<<"$line")"
}

ucx() { # label rep env-words...
    local label=$1 rep=$2
    shift 2
    PORT=$((PORT + 1))
    local slog=$OUT/$label-$rep.server clog=$OUT/$label-$rep.out
    env "$@" timeout -k 5 300 taskset -c 0 ucx_perftest -p "$PORT" >"$slog" 2>&1 &
    local pid=$!
    if listening "$PORT" "$pid"; then
        env "$@" timeout -k 5 300 taskset -c 1 ucx_perftest "$ADDR" -p "$PORT" -t tag_lat -s 8 -n "$ITERS" -w 1000 >"$clog" 2>&1
    fi
    wait "$pid"
    # Final: iters p50 avg(last) avg(overall) ...
    local f
    f=$(awk '/^Final:/ { print $3, $5; exit }' "$clog")
    if [[ -z $f ]]; then
        row "$label" "$rep" fail fail
        status=1
        return
    fi
    row "$label" "$rep" ${f% *} ${f#* }
}

perftest() { # label rep extra-args...
    local label=$1 rep=$2
    shift 2
    PORT=$((PORT + 1))
    local slog=$OUT/$label-$rep.server clog=$OUT/$label-$rep.out
    local opts=(-d "$DEV" -i 1 -x "$GID" -s 8 -n "$ITERS" -F -p "$PORT" "$@")
    timeout -k 5 300 taskset -c 0 ib_send_lat "${opts[@]}" >"$slog" 2>&1 &
    local pid=$!
    if listening "$PORT" "$pid"; then
        timeout -k 5 300 taskset -c 1 ib_send_lat "${opts[@]}" "$ADDR" >"$clog" 2>&1
    fi
    wait "$pid"
    # #bytes #iterations t_min t_max t_typical t_avg ...
    local f
    f=$(awk 'hdr && $1 ~ /^[0-9]+$/ { print $5, $6; exit } /#bytes/ { hdr = 1 }' "$clog")
    if [[ -z $f || $f = *inf* || $f = *nan* ]]; then
        row "$label" "$rep" fail fail
        status=1
        return
    fi
    row "$label" "$rep" ${f% *} ${f#* }
}

UCX_RC=(UCX_TLS=rc_v,self "UCX_NET_DEVICES=$DEV:1" UCX_UD_VERBS_ETH_DGID_CHECK=n)
UCX_DEFAULT=("UCX_NET_DEVICES=$DEV:1" UCX_UD_VERBS_ETH_DGID_CHECK=n)
echo "verbs-lat-ab: A=$A B=$B reps=$REPS iters=$ITERS; load: $(cat /proc/loadavg)"
for rep in $(seq "$REPS"); do
    xfer A "$A" "$rep"
    xfer B "$B" "$rep"
    ucx ucx_rc_v "$rep" "${UCX_RC[@]}"
    ucx ucx_default "$rep" "${UCX_DEFAULT[@]}"
    perftest ib_send_lat "$rep"
    perftest ib_send_lat_I8 "$rep" -I 8
done

python3 - "$ROWS" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    tool, rep, p50, avg = line.split()
    if p50 != "fail":
        rows[(tool, int(rep))] = (float(p50), float(avg))
tools = ["A", "B", "ucx_rc_v", "ucx_default", "ib_send_lat", "ib_send_lat_I8"]
reps = sorted({r for _, r in rows})
print("\nhalf a round trip, µs: p50 / avg per repetition")
print("| tool | " + " | ".join(f"rep {r}" for r in reps) + " | median p50 | median avg |")
print("|---|" + "---|" * (len(reps) + 2))
for t in tools:
    cells = [f"{rows[(t, r)][0]:.2f} / {rows[(t, r)][1]:.2f}" if (t, r) in rows else "n/a" for r in reps]
    p = [rows[(t, r)][0] for r in reps if (t, r) in rows]
    a = [rows[(t, r)][1] for r in reps if (t, r) in rows]
    med = lambda v: f"{statistics.median(v):.2f}" if v else "n/a"
    print(f"| {t} | " + " | ".join(cells) + f" | {med(p)} | {med(a)} |")
print("\nratios within each repetition (p50 / avg), and their median")
print("| ratio | " + " | ".join(f"rep {r}" for r in reps) + " | median p50 | median avg |")
print("|---|" + "---|" * (len(reps) + 2))
for x in ("A", "B"):
    for y in ("ucx_rc_v", "ucx_default", "ib_send_lat", "ib_send_lat_I8"):
        rp, ra, cells = [], [], []
        for r in reps:
            if (x, r) in rows and (y, r) in rows:
                p, a = rows[(x, r)][0] / rows[(y, r)][0], rows[(x, r)][1] / rows[(y, r)][1]
                rp.append(p); ra.append(a); cells.append(f"{p:.3f} / {a:.3f}")
            else:
                cells.append("n/a")
        med = lambda v: f"{statistics.median(v):.3f}" if v else "n/a"
        print(f"| {x} / {y} | " + " | ".join(cells) + f" | {med(rp)} | {med(ra)} |")
rp = [rows[("B", r)][0] / rows[("A", r)][0] for r in reps if ("A", r) in rows and ("B", r) in rows]
ra = [rows[("B", r)][1] / rows[("A", r)][1] for r in reps if ("A", r) in rows and ("B", r) in rows]
if rp:
    print(f"\nB / A, median of the repetitions: p50 {statistics.median(rp):.3f}, avg {statistics.median(ra):.3f}")
EOF
exit $status

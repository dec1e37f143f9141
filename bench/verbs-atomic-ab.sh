#!/usr/bin/env bash
# verbs-atomic-ab.sh - in the Soft-RoCE guest: the fetch-and-add round trip of two
# xfer-perf builds (A, B) over verbs with device atomics, alternated, against
# ucx_perftest's ucp_fadd over rc_verbs (UCX's default atomic mode, and
# UCX_ATOMIC_MODE=device) in the same repetition; xfer B in `cpu` mode too.
#
# usage (host): tests/vm/run-guest.sh bench/verbs-atomic-ab.sh A=PATH B=PATH [REPS=3] [ITERS=10000]
#   (A and B: xfer-perf binaries, e.g. copies of `tests/vm/build-verbs.sh --only
#   XFER_PERF` output from two trees); the report goes to $XFER_VM_RESULTS/atomic-ab.md
#   and stdout. Servers on CPU 0, clients on CPU 1, as bench/atomic-compare.sh.

set -uo pipefail
cd "$(dirname "$0")/.."
for kv in "$@"; do export "${kv?}"; done
: "${A:?A=xfer-perf build}" "${B:?B=xfer-perf build}"
REPS=${REPS:-3} ITERS=${ITERS:-10000}
export UCX_NET_DEVICES="${XFER_VERBS_DEVICE:-rxe0}:1" UCX_UD_VERBS_ETH_DGID_CHECK=n
addr=${XFER_RDMA_ADDR:-10.11.0.1}
out=${XFER_VM_RESULTS:-/tmp}
raw=$(mktemp /tmp/atomic-ab.XXXXXX)
trap 'rm -f "$raw" "$raw".*' EXIT
port=$((20000 + RANDOM % 10000))

# xfer BIN MODE: "p50 avg" of one atomic_lat run, or "n/a n/a".
xfer() {
    local bin=$1 mode=$2 name= pid line
    XFER_PROVIDER=verbs XFER_ATOMIC_MODE=$mode timeout 300 taskset -c 0 "$bin" --json server >"$raw.srv" 2>&1 &
    pid=$!
    for _ in $(seq 200); do
        name=$(awk '/^xfer-perf server:/ { print $3; exit }' "$raw.srv")
        [[ -n $name ]] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    line=$(XFER_PROVIDER=verbs XFER_ATOMIC_MODE=$mode timeout 300 taskset -c 1 "$bin" --json --test atomic_lat \
        --iters "$ITERS" client "$name" 2>"$raw.cli" | grep '^{' | tail -n 1)
    wait "$pid" 2>/dev/null
    p50=$(sed -n 's/.*"p50_us":\([0-9.]*\).*/\1/p' <<<"$line")
    avg=$(sed -n 's/.*"avg_us":\([0-9.]*\).*/\1/p' <<<"$line")
    [[ -n $p50 ]] || echo "[atomic-ab] xfer $bin $mode failed: $(tail -n 2 "$raw.cli")" >&2
    echo "${p50:-n/a} ${avg:-n/a}"
}

# ucx [ENV...]: "p50 avg" of one ucp_fadd run, or "n/a n/a".
ucx() {
    local srv line=
    port=$((port + 1))
    env UCX_TLS=rc_v,ud_v,self "$@" timeout 300 taskset -c 0 ucx_perftest -p "$port" >/dev/null 2>&1 &
    srv=$!
    # The client fails at once while the server is not listening yet: retry, bounded.
    for _ in $(seq 100); do
        if line=$(env UCX_TLS=rc_v,ud_v,self "$@" timeout 300 taskset -c 1 ucx_perftest "$addr" -p "$port" \
            -t ucp_fadd -n "$ITERS" -f 2>/dev/null); then
            break
        fi
        line=
        kill -0 "$srv" 2>/dev/null || break
        sleep 0.1
    done
    kill "$srv" 2>/dev/null
    wait "$srv" 2>/dev/null
    # -f: iterations, p50, average, overall (µs), ...
    awk 'NF >= 8 { p = $2; a = $3 } END { if (p == "") print "n/a n/a"; else print p, a }' <<<"$line"
}

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq "$REPS"); do
    echo "[atomic-ab] repetition $r of $REPS" >&2
    printf '%s\t%s\t%s\n' "$r" "A device" "$(xfer "$A" device)" >>"$raw"
    printf '%s\t%s\t%s\n' "$r" "B device" "$(xfer "$B" device)" >>"$raw"
    printf '%s\t%s\t%s\n' "$r" "UCX default" "$(ucx)" >>"$raw"
    printf '%s\t%s\t%s\n' "$r" "UCX device" "$(ucx UCX_ATOMIC_MODE=device)" >>"$raw"
    printf '%s\t%s\t%s\n' "$r" "B cpu" "$(xfer "$B" cpu)" >>"$raw"
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

{
    echo "## Fetch-and-add round trip over verbs: xfer A and B against UCX ($(date -u +%F), $REPS repetitions)"
    echo
    echo "Guest load average $load_start at the start, $load_end at the end; $ITERS iterations each;"
    echo "A = $A, B = $B (device atomics, then B with XFER_ATOMIC_MODE=cpu);"
    echo "UCX: ucx_perftest -t ucp_fadd over UCX_TLS=rc_v,ud_v,self, its default atomic mode and"
    echo "UCX_ATOMIC_MODE=device. Per repetition, in run order; µs, p50 / avg; ratios to UCX default of the same repetition."
    echo
    python3 - "$raw" <<'EOF'
import sys, statistics
cols = ["A device", "B device", "UCX default", "UCX device", "B cpu"]
reps = {}
for line in open(sys.argv[1]):
    r, col, val = line.rstrip("\n").split("\t")
    p, a = val.split()
    reps.setdefault(r, {})[col] = (p, a)
def f(x):
    try:
        return float(x)
    except ValueError:
        return None
print("| rep | " + " | ".join(cols) + " | A/UCX p50 | B/UCX p50 | A/UCX avg | B/UCX avg |")
print("|---|" + "---|" * (len(cols) + 4))
ratios = {k: [] for k in ("ap", "bp", "aa", "ba")}
for r in sorted(reps, key=int):
    row = reps[r]
    cells = [f"{row.get(c, ('n/a', 'n/a'))[0]} / {row.get(c, ('n/a', 'n/a'))[1]}" for c in cols]
    u = row.get("UCX default", ("n/a", "n/a"))
    out = []
    for key, c, i in (("ap", "A device", 0), ("bp", "B device", 0), ("aa", "A device", 1), ("ba", "B device", 1)):
        x, y = f(row.get(c, ("n/a", "n/a"))[i]), f(u[i])
        if x and y:
            ratios[key].append(x / y)
            out.append(f"{x / y:.2f}x")
        else:
            out.append("n/a")
    print(f"| {r} | " + " | ".join(cells) + " | " + " | ".join(out) + " |")
med = lambda v: f"{statistics.median(v):.2f}x" if v else "n/a"
print()
print(f"Medians of the per-repetition ratios: A/UCX p50 {med(ratios['ap'])}, B/UCX p50 {med(ratios['bp'])}, "
      f"A/UCX avg {med(ratios['aa'])}, B/UCX avg {med(ratios['ba'])}.")
EOF
} | tee "$out/atomic-ab.md"

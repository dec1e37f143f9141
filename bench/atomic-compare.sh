#!/usr/bin/env bash
# atomic-compare.sh - remote atomics: xfer-perf's atomic_lat, atomic_cas_lat and atomic_rate
# against ucx_perftest's ucp_fadd, ucp_cswap and ucp_add, two processes on this
# host, in one run.
#
# Rows: fetch-and-add latency (a 64-bit fetch-and-add's whole round trip, one at
# a time: xfer-perf atomic_lat, ucx_perftest ucp_fadd; p50 and average, µs);
# compare-and-swap latency (xfer-perf atomic_cas_lat, each swapping the count
# so far for the next; ucx_perftest ucp_cswap); the add rate (64-bit adds without a fetch:
# xfer-perf atomic_rate with 64 in flight, each completed when sent and a fetch
# behind the last, ucx_perftest ucp_add, which flushes once at the end;
# operations/s), and xfer's adds completed by the target's answer (atomic_rate_dc,
# delivery complete: what every xfer add cost before they completed when sent).
# Columns: xfer over tcp and over shm (XFER_PROVIDER), UCX over TCP
# (UCX_TLS=tcp) and with its defaults (shared memory on one host). Every server
# is pinned to CPU $SERVER_CPU, every client to CPU $CLIENT_CPU; the tools
# alternate within each row and repetition; the tables show medians over the
# repetitions (min-max in brackets) and xfer's ratio to UCX over the same kind
# of transport.
#
# usage: bench/atomic-compare.sh [--reps N] [--out FILE]
# environment: LAT_ITERS (20000), RATE_ITERS (200000), SERVER_CPU (0),
#   CLIENT_CPU (1), XFER_PERF (a prebuilt xfer-perf instead of building one),
#   PROVIDERS (the xfer columns, "tcp shm"; PROVIDER:MODE runs it with
#   XFER_ATOMIC_MODE=MODE), UCX_TLSES (the UCX columns, "tcp default"),
#   PEER_ADDR (what clients dial, 127.0.0.1). In the Soft-RoCE guest:
#   PROVIDERS="verbs verbs:cpu" UCX_TLSES=rc_v,ud_v,self PEER_ADDR=10.11.0.1
#   with UCX_NET_DEVICES=$XFER_VERBS_DEVICE:1 exported (rc_verbs alone fails
#   there: "no auxiliary transport", ud_verbs makes its wire-up).

set -euo pipefail
cd "$(dirname "$0")/.."

reps=3
out=
while [[ $# -gt 0 ]]; do
    case $1 in
    --reps) reps=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
lat_iters=${LAT_ITERS:-20000}
providers=${PROVIDERS:-tcp shm}
tlses=${UCX_TLSES:-tcp default}
peer_addr=${PEER_ADDR:-127.0.0.1}
rate_iters=${RATE_ITERS:-200000}
s_cpu=${SERVER_CPU:-0}
c_cpu=${CLIENT_CPU:-1}

log() { echo "atomic-compare: $*" >&2; }

have_ucx=0; command -v ucx_perftest >/dev/null && have_ucx=1
[[ $have_ucx == 1 ]] || log "ucx_perftest not found (apt-get install ucx-utils): UCX columns say n/a"

if [[ -n ${XFER_PERF:-} ]]; then
    xfer=$XFER_PERF
else
    log "building xfer-perf"
    CARGO_INCREMENTAL=0 cargo build --locked --release -q --bin xfer-perf >&2
    xfer=${CARGO_TARGET_DIR:-target}/release/xfer-perf
fi

raw=$(mktemp /tmp/atomic-compare.XXXXXX)
trap 'rm -f "$raw" "$raw".*' EXIT
port=$((20000 + RANDOM % 10000))

# rec ROW COLUMN VALUE: one measurement.
rec() { printf '%s\t%s\t%s\n' "$1" "$2" "${3:-}" >>"$raw"; }

# xfer_run PROVIDER[:MODE] TEST ITERS [ARGS...]: the client's JSON line, or nothing.
xfer_run() {
    local prov=${1%%:*} mode= test=$2 n=$3 slog=$raw.srv name= pid
    [[ $1 == *:* ]] && mode=${1#*:}
    shift 3
    export XFER_ATOMIC_MODE=${mode:-auto}
    XFER_PROVIDER=$prov XFER_TCP_ADDR=$peer_addr taskset -c "$s_cpu" "$xfer" --json server >"$slog" 2>&1 &
    pid=$!
    for _ in $(seq 200); do
        name=$(awk '/^xfer-perf server:/ { print $3; exit }' "$slog")
        [[ -n $name ]] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    if [[ -z $name ]]; then
        log "xfer-perf server did not start: $(tail -n 3 "$slog")"
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        return
    fi
    XFER_PROVIDER=$prov XFER_TCP_ADDR=$peer_addr timeout 300 taskset -c "$c_cpu" "$xfer" --json --test "$test" \
        --iters "$n" "$@" client "$name" 2>"$raw.cli" | grep '^{' | tail -n 1 ||
        log "xfer-perf $test over $prov failed: $(tail -n 3 "$raw.cli")"
    wait "$pid" 2>/dev/null || true
}

# json FIELD: the number FIELD of the JSON line on stdin.
json() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p"; }

# ucx_run TLS ARGS...: the client's final line (ucx_perftest -f), or nothing.
ucx_run() {
    local tls=$1 srv out
    shift
    [[ $tls == default ]] && tls=
    port=$((port + 1))
    env ${tls:+UCX_TLS=$tls} taskset -c "$s_cpu" ucx_perftest -p "$port" >/dev/null 2>&1 &
    srv=$!
    # The client fails at once while the server is not listening yet: retry, bounded.
    for _ in $(seq 100); do
        if out=$(env ${tls:+UCX_TLS=$tls} timeout 300 taskset -c "$c_cpu" ucx_perftest "$peer_addr" -p "$port" \
            "$@" -f 2>/dev/null); then
            wait "$srv" || true
            tail -n 1 <<<"$out"
            return
        fi
        kill -0 "$srv" 2>/dev/null || break
        sleep 0.1
    done
    kill "$srv" 2>/dev/null || true
    wait "$srv" 2>/dev/null || true
}

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq "$reps"); do
    log "repetition $r of $reps"
    for prov in $providers; do
        for row in fadd cswap; do
            test=atomic_lat
            [[ $row == cswap ]] && test=atomic_cas_lat
            line=$(xfer_run "$prov" "$test" "$lat_iters")
            rec "$row" "xfer $prov p50" "$(json p50_us <<<"$line")"
            rec "$row" "xfer $prov avg" "$(json avg_us <<<"$line")"
        done
        line=$(xfer_run "$prov" atomic_rate "$rate_iters" --window 64)
        rec add "xfer $prov" "$(json msg_rate <<<"$line")"
        line=$(xfer_run "$prov" atomic_rate_dc "$rate_iters" --window 64)
        rec add_dc "xfer $prov" "$(json msg_rate <<<"$line")"
    done
    if [[ $have_ucx == 1 ]]; then
        for tls in $tlses; do
            # -f: iterations, p50, average and overall latency (µs), average
            # and overall bandwidth, average and overall message rate.
            for row in fadd cswap; do
                line=$(ucx_run "$tls" -t "ucp_$row" -n "$lat_iters")
                rec "$row" "ucx $tls p50" "$(awk 'NF >= 8 { print $2 }' <<<"$line")"
                rec "$row" "ucx $tls avg" "$(awk 'NF >= 8 { print $3 }' <<<"$line")"
            done
            line=$(ucx_run "$tls" -t ucp_add -n "$rate_iters")
            rec add "ucx $tls" "$(awk 'NF >= 8 { print $8 }' <<<"$line")"
        done
    fi
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

report() {
    echo "## Remote atomics: xfer against UCX ($(date -u +%F), $reps repetitions)"
    echo
    echo "Host: $(nproc) CPUs, load average $load_start at the start, $load_end at the end;"
    echo "servers on CPU $s_cpu, clients on CPU $c_cpu; $(ucx_info -v 2>/dev/null | sed -n "s/^# \(UCT \)\?Version /UCX /p" | head -n 1)."
    echo "xfer: $providers (PROVIDER:MODE with XFER_ATOMIC_MODE=MODE); UCX_TLS: $tlses."
    echo "Medians of the repetitions (each cell: the median, then min-max in brackets when they differ);"
    echo "ratios are xfer's to the first UCX column."
    echo
    python3 - "$raw" "$providers" "$tlses" <<'EOF'
import sys, statistics
rows = {}
for line in open(sys.argv[1]):
    row, col, val = line.rstrip("\n").split("\t")
    try:
        rows.setdefault(row, {}).setdefault(col, []).append(float(val))
    except ValueError:
        rows.setdefault(row, {}).setdefault(col, [])
xfers = [f"xfer {p}" for p in sys.argv[2].split()]
ucxs = [f"ucx {t}" for t in sys.argv[3].split()]

def med(row, col):
    v = rows.get(row, {}).get(col) or []
    return statistics.median(v) if v else None

def cell(row, col, digits):
    v = rows.get(row, {}).get(col) or []
    if not v:
        return "n/a"
    m = f"{statistics.median(v):.{digits}f}"
    lo, hi = f"{min(v):.{digits}f}", f"{max(v):.{digits}f}"
    return m if lo == hi else f"{m} ({lo}-{hi})"

def ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "n/a"

ref = ucxs[0] if ucxs else None
head = xfers + ucxs + [f"{x}/{ref}" for x in xfers]
print("### Latency of one 64-bit atomic, whole round trip (µs; lower is better)")
print()
print("| atomic | stat | " + " | ".join(head) + " |")
print("|---|---|" + "---|" * len(head))
for row, name in (("fadd", "fetch-and-add (atomic_lat; ucp_fadd)"), ("cswap", "compare-and-swap (atomic_cas_lat; ucp_cswap)")):
    for stat in ("p50", "avg"):
        d = 2 if stat == "avg" else 3
        cells = [cell(row, f"{c} {stat}", d) for c in xfers + ucxs]
        ratios = [ratio(med(row, f"{x} {stat}"), med(row, f"{ref} {stat}")) for x in xfers]
        print(f"| {name} | {stat} | " + " | ".join(cells + ratios) + " |")
print()
print("### 64-bit add rate, no fetch (operations/s; higher is better)")
print()
print("| | " + " | ".join(head) + " |")
print("|---|" + "---|" * len(head))
for row, name in (("add", "add (xfer: atomic_rate, 64 in flight; ucp_add)"), ("add_dc", "add, delivery complete (xfer: atomic_rate_dc)")):
    cells = [cell(row, x, 0) for x in xfers] + [cell("add", u, 0) for u in ucxs]
    ratios = [ratio(med(row, x), med("add", ref)) for x in xfers]
    print(f"| {name} | " + " | ".join(cells + ratios) + " |")
EOF
}

if [[ -n $out ]]; then
    report | tee "$out"
else
    report
fi

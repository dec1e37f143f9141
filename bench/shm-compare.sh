#!/usr/bin/env bash
# shm-compare.sh - xfer-perf over shared memory (XFER_PROVIDER, default shm+tcp: the
# default provider, which serves a peer on this host over shared memory; `shm` for the
# transport alone) against UCX and libfabric's shm provider, two processes on this host,
# in one run.
#
# Rows: tag_lat 8 B, 64 B, 4 KiB (half a round trip, p50 and average); tag_bw
# 64 KiB, 1 MiB, 4 MiB (streaming, MiB/s); the 8 B message rate (xfer-perf
# tag_rate with 64 sends in flight; ucx_perftest tag_bw in its default mode and
# with -O 64). Columns: xfer-perf; ucx_perftest with its defaults, with
# UCX_TLS=posix,self and UCX_TLS=sm,self; fi_pingpong -p shm -e rdm -m tagged
# (libfabric's shm provider: latency, and a ping-pong bandwidth with one message
# in flight, which is not comparable with the streaming columns; fabtests'
# fi_rma_bw and friends are not packaged by Debian). Every server is pinned to
# CPU $SERVER_CPU, every client to CPU $CLIENT_CPU; the tools alternate within
# each row and repetition; the table shows medians over the repetitions and
# xfer's ratio to UCX's default and to the best UCX column.
#
# usage: bench/shm-compare.sh [--reps N] [--out FILE] [--no-install]
# environment: LAT_ITERS (100000), RATE_ITERS (1000000), SERVER_CPU (0),
#   CLIENT_CPU (1), XFER_PERF (a prebuilt xfer-perf instead of building one),
#   XFER_PROVIDER (shm+tcp)

set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

reps=3
out=
install=1
while [[ $# -gt 0 ]]; do
    case $1 in
    --reps) reps=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --no-install) install=0; shift ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
lat_iters=${LAT_ITERS:-100000}
rate_iters=${RATE_ITERS:-1000000}
s_cpu=${SERVER_CPU:-0}
c_cpu=${CLIENT_CPU:-1}
provider=${XFER_PROVIDER:-shm+tcp}

log() { echo "shm-compare: $*" >&2; }

missing=()
command -v ucx_perftest >/dev/null || missing+=(ucx-utils)
command -v fi_pingpong >/dev/null || missing+=(libfabric-bin)
if [[ ${#missing[@]} -gt 0 && $install == 1 ]]; then
    log "installing ${missing[*]}"
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2 ||
        log "could not install ${missing[*]}: their columns will say n/a"
fi
have_ucx=0; command -v ucx_perftest >/dev/null && have_ucx=1
have_fi=0; command -v fi_pingpong >/dev/null && have_fi=1

if [[ -n ${XFER_PERF:-} ]]; then
    xfer=$XFER_PERF
else
    log "building xfer-perf"
    CARGO_INCREMENTAL=0 cargo build --locked --release -q --bin xfer-perf >&2
    xfer=${CARGO_TARGET_DIR:-target}/release/xfer-perf
fi

raw=$(mktemp /tmp/shm-compare.XXXXXX)
trap 'rm -f "$raw" "$raw".*' EXIT
port=$((20000 + RANDOM % 10000))

# rec ROW COLUMN VALUE: one measurement.
rec() { printf '%s\t%s\t%s\n' "$1" "$2" "${3:-}" >>"$raw"; }

# xfer_run TEST SIZE ITERS [ARGS...]: prints the client's JSON line, or nothing.
xfer_run() {
    local test=$1 size=$2 n=$3
    shift 3
    xfer_server "$raw.srv" env XFER_PROVIDER="$provider" taskset -c "$s_cpu" "$xfer" || return 0
    XFER_PROVIDER=$provider timeout 300 taskset -c "$c_cpu" "$xfer" --json --test "$test" --sizes "$size" \
        --iters "$n" "$@" client "$XFER_SERVER_NAME" 2>"$raw.cli" | grep '^{' | tail -n 1 ||
        log "xfer-perf $test $size failed: $(tail -n 3 "$raw.cli")"
    wait "$XFER_SERVER_PID" 2>/dev/null || true
}

# json FIELD: the number FIELD of the JSON line on stdin.
json() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p"; }

# ucx_run TLS ARGS...: the client's final line (ucx_perftest -f), or nothing.
ucx_run() {
    local tls=$1
    shift
    [[ $tls == default ]] && tls=
    port=$((port + 1))
    env ${tls:+UCX_TLS=$tls} taskset -c "$s_cpu" ucx_perftest -p "$port" >/dev/null 2>&1 &
    client_retry $! env ${tls:+UCX_TLS=$tls} timeout 300 taskset -c "$c_cpu" ucx_perftest 127.0.0.1 -p "$port" \
        "$@" -f || true
}

# fi_run SIZE ITERS: fi_pingpong's result line over libfabric's shm provider.
fi_run() {
    local size=$1 n=$2
    port=$((port + 1))
    taskset -c "$s_cpu" fi_pingpong -p shm -e rdm -m tagged -S "$size" -I "$n" -B "$port" >/dev/null 2>&1 &
    client_retry $! timeout 300 taskset -c "$c_cpu" fi_pingpong -p shm -e rdm -m tagged -S "$size" -I "$n" \
        -P "$port" 127.0.0.1 || true
}

TLS=(default posix,self sm,self)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq "$reps"); do
    log "repetition $r of $reps"
    for size in 8 64 4096; do
        row="lat $size"
        line=$(xfer_run tag_lat "$size" "$lat_iters")
        rec "$row" "xfer p50" "$(json p50_us <<<"$line")"
        rec "$row" "xfer avg" "$(json avg_us <<<"$line")"
        if [[ $have_ucx == 1 ]]; then
            for tls in "${TLS[@]}"; do
                # -f: iterations, typical (p50), average, overall latency (µs), ...
                line=$(ucx_run "$tls" -t tag_lat -s "$size" -n "$lat_iters")
                rec "$row" "ucx $tls p50" "$(awk 'NF >= 4 { print $2 }' <<<"$line")"
                rec "$row" "ucx $tls avg" "$(awk 'NF >= 4 { print $4 }' <<<"$line")"
            done
        fi
        if [[ $have_fi == 1 ]]; then
            # usec/xfer is already half a round trip.
            line=$(fi_run "$size" "$lat_iters")
            rec "$row" "fi avg" "$(awk 'NF >= 8 { print $7 }' <<<"$line")"
        fi
    done
    for size in 65536 1048576 4194304; do
        n=$((20000 * 65536 / size))
        n=$((n < 500 ? 500 : n))
        row="bw $size"
        line=$(xfer_run tag_bw "$size" "$n" --window 64)
        rec "$row" "xfer" "$(json mib_s <<<"$line")"
        if [[ $have_ucx == 1 ]]; then
            for tls in "${TLS[@]}"; do
                # UCX's MB/s are 2^20 bytes: the overall column.
                line=$(ucx_run "$tls" -t tag_bw -s "$size" -n "$n")
                rec "$row" "ucx $tls" "$(awk 'NF >= 6 { print $6 }' <<<"$line")"
            done
        fi
        if [[ $have_fi == 1 ]]; then
            # fabtests' MB/sec are 10^6 bytes; one message in flight.
            line=$(fi_run "$size" "$n")
            rec "$row" "fi pingpong" "$(awk 'NF >= 8 { printf "%.1f", $6 * 1e6 / 1048576 }' <<<"$line")"
        fi
    done
    row="rate 8"
    line=$(xfer_run tag_rate 8 "$rate_iters" --window 64)
    rec "$row" "xfer" "$(json msg_rate <<<"$line")"
    if [[ $have_ucx == 1 ]]; then
        for tls in "${TLS[@]}"; do
            line=$(ucx_run "$tls" -t tag_bw -s 8 -n "$rate_iters")
            rec "$row" "ucx $tls" "$(awk 'NF >= 8 { print $8 }' <<<"$line")"
            line=$(ucx_run "$tls" -t tag_bw -s 8 -n "$rate_iters" -O 64)
            rec "$row" "ucx $tls -O 64" "$(awk 'NF >= 8 { print $8 }' <<<"$line")"
        done
    fi
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

report() {
    echo "## xfer ($provider) over shared memory against UCX and libfabric shm ($(date -u +%F), $reps repetitions)"
    echo
    echo "Host: $(nproc) CPUs, load average $load_start at the start, $load_end at the end;"
    echo "servers on CPU $s_cpu, clients on CPU $c_cpu; $(ucx_info -v 2>/dev/null | sed -n "s/^# \(UCT \)\?Version /UCX /p" | head -n 1);"
    echo "libfabric $(fi_info --version 2>/dev/null | awk '/libfabric:/ { print $2 }' || echo n/a)."
    echo "Medians of the repetitions (each cell: the median, then min-max in brackets when they differ)."
    echo
    python3 - "$raw" <<'EOF'
import sys, statistics
rows, order = {}, []
for line in open(sys.argv[1]):
    row, col, val = line.rstrip("\n").split("\t")
    if row not in rows:
        rows[row] = {}
        order.append(row)
    try:
        rows[row].setdefault(col, []).append(float(val))
    except ValueError:
        rows[row].setdefault(col, [])

def med(row, col):
    v = rows[row].get(col) or []
    return statistics.median(v) if v else None

def cell(row, col, digits):
    v = rows[row].get(col) or []
    if not v:
        return "n/a"
    m = f"{statistics.median(v):.{digits}f}"
    lo, hi = f"{min(v):.{digits}f}", f"{max(v):.{digits}f}"
    return m if lo == hi else f"{m} ({lo}-{hi})"

def ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "n/a"

tls = ["default", "posix,self", "sm,self"]
print("### Latency (µs, half a round trip; lower is better)")
print()
print("| size | xfer p50 | UCX default p50 | UCX posix p50 | UCX sm p50 | xfer avg | UCX default avg | UCX posix avg | UCX sm avg | libfabric shm avg | xfer/UCX default (p50) | xfer/best UCX (p50) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for row in order:
    kind, size = row.split()
    if kind != "lat":
        continue
    x = med(row, "xfer p50")
    u = [med(row, f"ucx {t} p50") for t in tls]
    best = min((v for v in u if v), default=None)
    print(f"| {size} B | {cell(row, 'xfer p50', 3)} | " + " | ".join(cell(row, f'ucx {t} p50', 3) for t in tls)
          + f" | {cell(row, 'xfer avg', 2)} | " + " | ".join(cell(row, f'ucx {t} avg', 2) for t in tls)
          + f" | {cell(row, 'fi avg', 2)} | {ratio(x, u[0])} | {ratio(x, best)} |")
print()
print("### Bandwidth (MiB/s, 2^20 bytes; higher is better)")
print()
print("| size | xfer tag_bw | UCX default | UCX posix | UCX sm | libfabric shm (ping-pong) | xfer/UCX default | xfer/best UCX |")
print("|---|---|---|---|---|---|---|---|")
for row in order:
    kind, size = row.split()
    if kind != "bw":
        continue
    x = med(row, "xfer")
    u = [med(row, f"ucx {t}") for t in tls]
    best = max((v for v in u if v), default=None)
    print(f"| {int(size) >> 10} KiB | {cell(row, 'xfer', 0)} | " + " | ".join(cell(row, f'ucx {t}', 0) for t in tls)
          + f" | {cell(row, 'fi pingpong', 0)} | {ratio(x, u[0])} | {ratio(x, best)} |")
print()
print("### 8 B message rate (messages/s; higher is better)")
print()
print("| | xfer tag_rate (window 64) | UCX default | UCX posix | UCX sm | xfer/UCX default | xfer/best UCX |")
print("|---|---|---|---|---|---|---|")
row = "rate 8"
if row in rows:
    x = med(row, "xfer")
    for mode, suffix in (("tag_bw", ""), ("tag_bw -O 64", " -O 64")):
        u = [med(row, f"ucx {t}{suffix}") for t in tls]
        best = max((v for v in u if v), default=None)
        print(f"| UCX {mode} | {cell(row, 'xfer', 0)} | " + " | ".join(cell(row, f'ucx {t}{suffix}', 0) for t in tls)
              + f" | {ratio(x, u[0])} | {ratio(x, best)} |")
EOF
}

if [[ -n $out ]]; then
    report | tee "$out"
else
    report
fi

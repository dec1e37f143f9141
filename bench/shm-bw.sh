#!/usr/bin/env bash
# shm-bw.sh - tag_bw over shared memory, two processes on this host: xfer-perf
# builds or settings (columns) against ucx_perftest with its defaults and with
# UCX_TLS=posix,self, alternating column by column within each repetition, so a
# load that comes and goes on a shared machine falls on every column alike.
#
# usage: bench/shm-bw.sh [--reps N] [--sizes LIST] [--buffers shared|per-op]
#                        [--out FILE] COLUMN...
#   COLUMN   LABEL=BIN[:VAR=VALUE,...]: xfer-perf BIN run with those variables,
#            e.g. after=target/release/xfer-perf:XFER_SHM_CMA=0 (default: one
#            column, `xfer`, the xfer-perf built from this tree)
#   --sizes  bytes, comma separated (default 65536,1048576,4194304)
#   --buffers  xfer-perf's --buffers: `shared` (one buffer per side, as
#            ucx_perftest: cache-resident) or `per-op` (a buffer per message in
#            flight, up to 64 MiB per side: cold at 1 MiB and more; ucx_perftest
#            has no such mode, its columns stay cache-resident)
# environment: SERVER_CPU (0), CLIENT_CPU (1), XFER_PROVIDER (shm+tcp),
#   UCX=0 to leave the UCX columns out, UCX_COLUMNS (default "default posix,self":
#   each TLS[:VAR=VALUE,...], e.g. posix,self:UCX_ALLOC_PRIO=heap), NICE=N to run
#   every benchmark process (xfer's and UCX's alike) at that niceness (-20: they
#   take their CPUs from other work on a shared machine, approaching a quiet
#   machine's figures).
# Prints, per size and column, the best and the median MiB/s (2^20 bytes) of the
# repetitions and each xfer column's ratio to UCX's columns (best to best,
# median to median), then the ratios within each repetition (each xfer column to
# each UCX column and to the first xfer column) and their median, and the load
# average at each repetition's start.

set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

reps=5
sizes=65536,1048576,4194304
buffers=shared
out=
cols=()
while [[ $# -gt 0 ]]; do
    case $1 in
    --reps) reps=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --buffers) buffers=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,/^$/p' "$0"; exit 0 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) cols+=("$1"); shift ;;
    esac
done
s_cpu=${SERVER_CPU:-0}
c_cpu=${CLIENT_CPU:-1}
provider=${XFER_PROVIDER:-shm+tcp}
use_ucx=${UCX:-1}
pin_s=(taskset -c "$s_cpu")
pin_c=(taskset -c "$c_cpu")
if [[ -n ${NICE:-} ]]; then
    pin_s=(nice -n "$NICE" "${pin_s[@]}")
    pin_c=(nice -n "$NICE" "${pin_c[@]}")
fi
command -v ucx_perftest >/dev/null || use_ucx=0
if [[ ${#cols[@]} -eq 0 ]]; then
    CARGO_INCREMENTAL=0 cargo build --locked --release -q --bin xfer-perf >&2
    cols=("xfer=${CARGO_TARGET_DIR:-target}/release/xfer-perf")
fi

raw=$(mktemp /tmp/shm-bw.XXXXXX)
trap 'rm -f "$raw" "$raw".*' EXIT
port=$((20000 + RANDOM % 10000))
log() { echo "shm-bw: $*" >&2; }

# xfer_run BIN SIZE ITERS VARS: the client's MiB/s, or nothing.
xfer_run() {
    local bin=$1 size=$2 n=$3 vars=$4 more=()
    local env=(XFER_PROVIDER="$provider")
    [[ -n $vars ]] && IFS=, read -r -a more <<<"$vars" && env+=("${more[@]}")
    xfer_server "$raw.srv" env "${env[@]}" "${pin_s[@]}" "$bin" || return 0
    env "${env[@]}" timeout 300 "${pin_c[@]}" "$bin" --json --test tag_bw --sizes "$size" --iters "$n" \
        --window 64 --buffers "$buffers" client "$XFER_SERVER_NAME" 2>"$raw.cli" | grep '^{' | tail -n 1 |
        sed -n 's/.*"mib_s":\([0-9.]*\).*/\1/p' || log "xfer-perf $size failed: $(tail -n 3 "$raw.cli")"
    wait "$XFER_SERVER_PID" 2>/dev/null || true
}

# ucx_run TLS[:VAR=VALUE,...] SIZE ITERS: ucx_perftest tag_bw's overall MiB/s, or
# nothing.
ucx_run() {
    local tls=${1%%:*} size=$2 n=$3 more=()
    [[ $1 == *:* ]] && IFS=, read -r -a more <<<"${1#*:}"
    [[ $tls == default ]] && tls=
    port=$((port + 1))
    local out
    env ${tls:+UCX_TLS=$tls} "${more[@]}" "${pin_s[@]}" ucx_perftest -p "$port" >/dev/null 2>&1 &
    # Not in a pipeline: client_retry reaps the server, which must be this
    # shell's child.
    out=$(client_retry $! env ${tls:+UCX_TLS=$tls} "${more[@]}" timeout 300 "${pin_c[@]}" ucx_perftest 127.0.0.1 -p "$port" \
        -t tag_bw -s "$size" -n "$n" -f) || true
    awk 'NF >= 6 { print $6 }' <<<"$out"
}

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
IFS=, read -r -a size_list <<<"$sizes"
for r in $(seq "$reps"); do
    log "repetition $r of $reps"
    echo "$r $(cut -d' ' -f1 /proc/loadavg)" >>"$raw.load"
    for size in "${size_list[@]}"; do
        n=$((20000 * 65536 / size))
        n=$((n < 500 ? 500 : n))
        for col in "${cols[@]}"; do
            label=${col%%=*}
            spec=${col#*=}
            bin=${spec%%:*}
            vars=
            [[ $spec == *:* ]] && vars=${spec#*:}
            printf '%s\t%s\t%s\t%s\n' "$size" "$label" "$r" "$(xfer_run "$bin" "$size" "$n" "$vars")" >>"$raw"
        done
        if [[ $use_ucx == 1 ]]; then
            for tls in ${UCX_COLUMNS:-default posix,self}; do
                printf '%s\t%s\t%s\t%s\n' "$size" "UCX $tls" "$r" "$(ucx_run "$tls" "$size" "$n")" >>"$raw"
            done
        fi
    done
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

report() {
    echo "## tag_bw over shared memory ($(date -u +%F), $reps repetitions, buffers $buffers, XFER_PROVIDER=$provider)"
    echo
    echo "Host: $(nproc) CPUs, load average $load_start at the start, $load_end at the end;"
    echo "servers on CPU $s_cpu, clients on CPU $c_cpu${NICE:+, every benchmark process at nice $NICE}; $(ucx_info -v 2>/dev/null | sed -n 's/^# Version /UCX /p' | head -n 1)."
    echo "Columns:"
    for col in "${cols[@]}"; do echo "- \`$col\`"; done
    echo
    echo "Load average (1 min) at each repetition's start: $(cut -d' ' -f2 "$raw.load" | paste -sd, - | sed 's/,/, /g')."
    echo
    python3 - "$raw" <<'EOF'
import sys, statistics
data, sizes, cols, byrep = {}, [], [], {}
for line in open(sys.argv[1]):
    size, col, rep, val = line.rstrip("\n").split("\t")
    if size not in sizes:
        sizes.append(size)
    if col not in cols:
        cols.append(col)
    v = data.setdefault((size, col), [])
    if val:
        v.append(float(val))
        byrep[(size, col, rep)] = float(val)

def stat(size, col):
    v = data.get((size, col)) or []
    return (max(v), statistics.median(v), min(v)) if v else None

xcols = [c for c in cols if not c.startswith("UCX ")]
ucols = [c for c in cols if c.startswith("UCX ")]
print("MiB/s: best / median (min) of the repetitions; ratios: best to best, median to median.")
print()
heads = cols + [f"{x} / {u}" for x in xcols for u in ucols]
print("| size | " + " | ".join(heads) + " |")
print("|---" * (1 + len(heads)) + "|")
for size in sizes:
    cells = []
    for c in cols:
        s = stat(size, c)
        cells.append(f"{s[0]:.0f} / {s[1]:.0f} ({s[2]:.0f})" if s else "n/a")
    for x in xcols:
        for u in ucols:
            a, b = stat(size, x), stat(size, u)
            cells.append(f"{a[0] / b[0]:.2f} / {a[1] / b[1]:.2f}" if a and b else "n/a")
    n = int(size)
    label = f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"
    print(f"| {label} | " + " | ".join(cells) + " |")
print()
# A load that comes and goes moves a whole repetition (its columns ran within
# seconds of each other): the ratio within each repetition, then their median.
pairs = [(x, u) for x in xcols for u in ucols] + [(x, xcols[0]) for x in xcols[1:]]
print("Paired ratios: per repetition, then the median (min-max) of those.")
print()
print("| size | " + " | ".join(f"{a} / {b}" for a, b in pairs) + " |")
print("|---" * (1 + len(pairs)) + "|")
reps = sorted({k[2] for k in byrep}, key=int)
for size in sizes:
    cells = []
    for a, b in pairs:
        r = [byrep[(size, a, k)] / byrep[(size, b, k)] for k in reps
             if (size, a, k) in byrep and (size, b, k) in byrep]
        cells.append(f"{statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f})" if r else "n/a")
    n = int(size)
    label = f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"
    print(f"| {label} | " + " | ".join(cells) + " |")
print()
print("Raw (MiB/s per repetition):")
print()
for size in sizes:
    for c in cols:
        print(f"- {size} {c}: " + ", ".join(f"{v:.0f}" for v in data.get((size, c), [])))
EOF
}

if [[ -n $out ]]; then
    report | tee "$out"
else
    report
fi

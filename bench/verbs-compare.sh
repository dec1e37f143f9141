#!/usr/bin/env bash
# verbs-compare.sh - xfer-perf over the verbs provider against perftest and UCX, all
# in ONE run of the Soft-RoCE guest (tests/vm/), as ratios: TCG timings are only
# meaningful against a peer measured in the same guest run.
#
#   perftest   ib_send_lat 8 B, ib_send_bw 64 KiB, ib_write_bw 64 KiB  (-d rxe0 -x GID)
#   UCX        ucx_perftest tag_lat 8 B, tag_bw 64 KiB
#              (UCX_TLS=rc_v,self UCX_NET_DEVICES=rxe0:1 UCX_UD_VERBS_ETH_DGID_CHECK=n)
#   libfabric  fi_pingpong -p verbs -e msg 8 B (send/recv on an RC QP set up by rdma_cm;
#              `-e rdm`, verbs;ofi_rxm, fails in fi_enable with EINVAL on rxe in 1.17.0)
#   xfer       xfer-perf tag_lat 8 B, tag_bw 64 KiB with XFER_PROVIDER=verbs
#
# Every server runs under `taskset -c 0`, every client under `taskset -c 1`. Each
# measurement is repeated (--reps, interleaved across tools) and the median run is
# reported. The Markdown report goes to --out (default $XFER_VM_RESULTS/verbs.md, which
# the host sees); the raw logs to $XFER_VM_RESULTS/verbs-raw/.
#
# Runs INSIDE the guest. From the host:
#   make bench-vm        (builds xfer-perf, boots, copies the report to bench/results/)
#   tests/vm/run-guest.sh bench/verbs-compare.sh --xfer-perf target/release/xfer-perf
#
# Exit status: 0 when every tool produced its figures; 1 when any failed, xfer-perf
# included (its cells then say n/a and the report and stdout say why); 2 on bad usage.
set -uo pipefail

usage() {
    cat <<'EOF'
usage: bench/verbs-compare.sh [--xfer-perf PATH] [--reps N] [--out FILE] [--commit REV] [--note TEXT]
  --xfer-perf PATH  xfer-perf binary built on the host (default $XFER_PERF); without one
                    the xfer cells say n/a and the script exits 1
  --reps N          repetitions of every measurement, the median run is reported (3)
  --out FILE        Markdown report (default $XFER_VM_RESULTS/verbs.md)
  --commit REV      source revision to print in the report
  --note TEXT       a line for the report's header (make bench-vm: the host's load)
environment: LAT_ITERS (10000), BW_ITERS (1000), SERVER_CPU (0), CLIENT_CPU (1),
  XFER_BENCH_PROVIDER (verbs; `tcp` checks this script's xfer-perf handling in the guest)
EOF
}

XFER=${XFER_PERF:-}
REPS=3
OUT=
COMMIT=
NOTE=
while [[ $# -gt 0 ]]; do
    case "$1" in
    --xfer-perf) [[ $# -ge 2 ]] || { usage >&2; exit 2; }; XFER=$2; shift 2 ;;
    --reps) [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || { usage >&2; exit 2; }; REPS=$2; shift 2 ;;
    --out) [[ $# -ge 2 ]] || { usage >&2; exit 2; }; OUT=$2; shift 2 ;;
    --commit) [[ $# -ge 2 ]] || { usage >&2; exit 2; }; COMMIT=$2; shift 2 ;;
    --note) [[ $# -ge 2 ]] || { usage >&2; exit 2; }; NOTE=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "verbs-compare: unknown argument $1" >&2; usage >&2; exit 2 ;;
    esac
done
if [[ ${XFER_IN_GUEST:-0} != 1 ]]; then
    echo "verbs-compare: run this inside the Soft-RoCE guest: make bench-vm, or" >&2
    echo "  tests/vm/run-guest.sh $0 --xfer-perf target/release/xfer-perf" >&2
    exit 2
fi
RESULTS=${XFER_VM_RESULTS:-/tmp}
OUT=${OUT:-$RESULTS/verbs.md}

DEV=${XFER_VERBS_DEVICE:-rxe0}
GID=${RXE_GID_INDEX:-1}
ADDR=${XFER_RDMA_ADDR:-10.11.0.1}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
LAT_SIZE=8
BW_SIZE=65536
LAT_ITERS=${LAT_ITERS:-10000}
LAT_WARMUP=$((LAT_ITERS / 10))
BW_ITERS=${BW_ITERS:-1000}
BW_WARMUP=$((BW_ITERS / 10))
PROVIDER=${XFER_BENCH_PROVIDER:-verbs}
UCX_ENV=("UCX_TLS=rc_v,self" "UCX_NET_DEVICES=$DEV:1" UCX_UD_VERBS_ETH_DGID_CHECK=n)
XFER_ENV=("XFER_PROVIDER=$PROVIDER")
[[ $PROVIDER == tcp ]] && XFER_ENV+=("XFER_TCP_ADDR=${XFER_TCP_ADDR:-127.0.0.1}")
SERVER_TIMEOUT=300 # hard bound on any server process
CLIENT_TIMEOUT=240 # hard bound on any client process
READY_TIMEOUT=60   # seconds for a server to get ready (TCG: UCX takes a few)
EXIT_TIMEOUT=20    # seconds for a server to exit after its client
PY=$(command -v /usr/bin/python3 || command -v python3 || true)

RAW=$RESULTS/verbs-raw
rm -rf "$RAW"
mkdir -p "$RAW" "$(dirname "$OUT")"
MANIFEST=$RAW/manifest.tsv
CMDS=$RAW/commands.txt
: >"$MANIFEST"
: >"$CMDS"
SERVER_PIDS=()

log() { printf '[verbs-compare] %s\n' "$*" >&2; }

# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
    local pid
    for pid in "${SERVER_PIDS[@]}"; do
        kill -0 "$pid" 2>/dev/null && kill -TERM "$pid" 2>/dev/null
    done
    return 0
}
trap cleanup EXIT

for tool in taskset timeout ib_send_lat ib_send_bw ib_write_bw ucx_perftest fi_pingpong; do
    command -v "$tool" >/dev/null || log "$tool not found (tests/vm/setup.sh installs it): its cells will say n/a"
done
[[ -n $PY ]] || { log "python3 is required for the report"; exit 2; }

HAVE_XFER=1
XFER_NOTE=
if [[ -z $XFER ]]; then
    HAVE_XFER=0
    XFER_NOTE="no xfer-perf binary given (--xfer-perf PATH)"
elif [[ ! -x $XFER ]]; then
    HAVE_XFER=0
    XFER_NOTE="$XFER is not executable"
fi
[[ $HAVE_XFER = 1 ]] || log "xfer-perf: $XFER_NOTE: its cells will say n/a"

# ------------------------------------------------------------------ helpers
port=18600
next_port() { port=$((port + 1)); }

# True once something listens on TCP port $1 (read from /proc: no connection is made,
# which would use up the server's one accept).
listening() {
    local hex
    hex=$(printf '%04X' "$1")
    awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { found = 1 } END { exit !found }' \
        /proc/net/tcp /proc/net/tcp6 2>/dev/null
}
wait_listening() { # port pid
    local deadline=$((SECONDS + READY_TIMEOUT))
    until listening "$1"; do
        kill -0 "$2" 2>/dev/null || return 1
        [[ $SECONDS -lt $deadline ]] || return 1
        sleep 0.1
    done
}
wait_line() { # file regex pid
    local deadline=$((SECONDS + READY_TIMEOUT))
    until grep -qE "$2" "$1" 2>/dev/null; do
        kill -0 "$3" 2>/dev/null || return 1
        [[ $SECONDS -lt $deadline ]] || return 1
        sleep 0.1
    done
}

SERVER_PID=
start_server() { # log env-words... -- command...
    local logf=$1
    shift
    local envs=()
    while [[ $1 != -- ]]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" timeout -k 5 "$SERVER_TIMEOUT" taskset -c "$SERVER_CPU" "$@" >"$logf" 2>&1 &
    SERVER_PID=$!
    SERVER_PIDS+=("$SERVER_PID")
}
# Waits (bounded) for the server to exit after its client; kills it if it does not.
# Returns the server's exit status (124 if it had to be killed).
finish_server() {
    local pid=$1 rc
    timeout "$EXIT_TIMEOUT" tail --pid="$pid" -f /dev/null 2>/dev/null
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        return 124
    fi
    wait "$pid" 2>/dev/null
    rc=$?
    return "$rc"
}
run_client() { # log env-words... -- command...
    local logf=$1
    shift
    local envs=()
    while [[ $1 != -- ]]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" timeout -k 5 "$CLIENT_TIMEOUT" taskset -c "$CLIENT_CPU" "$@" >"$logf" 2>&1
}
record() { printf '%s\n' "$*" >>"$CMDS"; }
# manifest: tool test rep status client-log server-log extra
note() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$MANIFEST"; }

# ------------------------------------------------------------ measurements
# True when perftest printed inf/nan latencies: it could not calibrate the CPU clock
# (its sampled TSC rate disagreed with /proc/cpuinfo and the sample failed; seen under TCG).
perftest_uncalibrated() {
    awk 'hdr && $1 ~ /^[0-9]+$/ { for (i = 3; i <= 6; i++) if (tolower($i) ~ /(inf|nan)/) bad = 1; exit }
         /#bytes/ { hdr = 1 } END { exit !bad }' "$1"
}
CPU_MHZ=$(awk -F: '/^cpu MHz/ { gsub(/[ \t]/, "", $2); print $2; exit }' /proc/cpuinfo)

perftest_run() { # rep label tool size iters [extra perftest args]
    local rep=$1 label=$2 tool=$3 size=$4 iters=$5
    shift 5
    local slog="$RAW/$label-r$rep.server" clog="$RAW/$label-r$rep.out" status=ok extra=-
    command -v "$tool" >/dev/null || { echo "$tool not installed" >"$clog"; note "$label" "$tool" "$rep" fail "$clog" - -; return; }
    next_port
    local opts=(-d "$DEV" -i 1 -x "$GID" -s "$size" -n "$iters" -F -p "$port" "$@")
    record "taskset -c $SERVER_CPU $tool ${opts[*]/$port/PORT}"
    record "taskset -c $CLIENT_CPU $tool ${opts[*]/$port/PORT} $ADDR"
    start_server "$slog" -- "$tool" "${opts[@]}"
    local pid=$SERVER_PID
    if wait_listening "$port" "$pid"; then
        run_client "$clog" -- "$tool" "${opts[@]}" "$ADDR" || status=fail
    else
        { echo "server never listened on port $port; its output:"; cat "$slog"; } >"$clog"
        status=fail
    fi
    finish_server "$pid" || status=fail
    if [[ $status = ok && " $* " = *" -C "* ]]; then
        extra="cycles_mhz=$CPU_MHZ"
    elif [[ $status = ok && $tool = *_lat ]] && perftest_uncalibrated "$clog" && [[ -n $CPU_MHZ ]]; then
        # Once more reporting CPU cycles, converted with the kernel's TSC rate.
        log "$tool printed inf/nan (it could not calibrate the CPU clock): again with -C, cycles / $CPU_MHZ MHz"
        mv "$clog" "$clog.uncalibrated"
        perftest_run "$rep" "$label" "$tool" "$size" "$iters" "$@" -C
        return
    fi
    note "$label" "$tool" "$rep" "$status" "$clog" "$slog" "$extra"
}

ucx_run() { # rep test size iters warmup
    local rep=$1 test=$2 size=$3 iters=$4 warmup=$5
    local slog="$RAW/ucx-$test-r$rep.server" clog="$RAW/ucx-$test-r$rep.out" status=ok
    command -v ucx_perftest >/dev/null || { echo "ucx_perftest not installed" >"$clog"; note ucx "$test" "$rep" fail "$clog" - -; return; }
    next_port
    local copts=("$ADDR" -p "$port" -t "$test" -s "$size" -n "$iters" -w "$warmup")
    record "${UCX_ENV[*]} taskset -c $SERVER_CPU ucx_perftest -p PORT"
    record "${UCX_ENV[*]} taskset -c $CLIENT_CPU ucx_perftest ${copts[*]/$port/PORT}"
    start_server "$slog" "${UCX_ENV[@]}" -- ucx_perftest -p "$port"
    local pid=$SERVER_PID
    if wait_listening "$port" "$pid"; then
        run_client "$clog" "${UCX_ENV[@]}" -- ucx_perftest "${copts[@]}" || status=fail
    else
        { echo "server never listened on port $port; its output:"; cat "$slog"; } >"$clog"
        status=fail
    fi
    finish_server "$pid" || status=fail
    note ucx "$test" "$rep" "$status" "$clog" "$slog" -
}

# fi_pingpong has no warm-up and times the connection setup too: each repetition also
# runs it with -I 1, and the report takes that run's time out (as bench/compare.sh does).
fi_run() { # rep iters
    local rep=$1 iters=$2
    local slog="$RAW/fi-n$iters-r$rep.server" clog="$RAW/fi-n$iters-r$rep.out" status=ok
    command -v fi_pingpong >/dev/null || { echo "fi_pingpong not installed" >"$clog"; note "fi" lat "$rep" fail "$clog" - "iters=$iters"; return; }
    next_port
    local opts=(-p verbs -e msg -d "$DEV" -S "$LAT_SIZE" -I "$iters")
    record "taskset -c $SERVER_CPU fi_pingpong ${opts[*]} -B PORT"
    record "taskset -c $CLIENT_CPU fi_pingpong ${opts[*]} -P PORT $ADDR"
    start_server "$slog" -- fi_pingpong "${opts[@]}" -B "$port"
    local pid=$SERVER_PID
    if wait_listening "$port" "$pid"; then
        run_client "$clog" -- fi_pingpong "${opts[@]}" -P "$port" "$ADDR" || status=fail
    else
        { echo "server never listened on port $port; its output:"; cat "$slog"; } >"$clog"
        status=fail
    fi
    finish_server "$pid" || status=fail
    note "fi" lat "$rep" "$status" "$clog" "$slog" "iters=$iters"
}

xfer_run() { # rep test size iters warmup
    local rep=$1 test=$2 size=$3 iters=$4 warmup=$5
    local slog="$RAW/xfer-$test-r$rep.server" clog="$RAW/xfer-$test-r$rep.out" status=ok name
    local opts=(--json --test "$test" --sizes "$size" --iters "$iters" --warmup "$warmup")
    record "${XFER_ENV[*]} taskset -c $SERVER_CPU xfer-perf ${opts[*]} server"
    record "${XFER_ENV[*]} taskset -c $CLIENT_CPU xfer-perf ${opts[*]} client NAME"
    start_server "$slog" "${XFER_ENV[@]}" -- "$XFER" "${opts[@]}" server
    local pid=$SERVER_PID
    if wait_line "$slog" '^xfer-perf server: [0-9A-Fa-f]+' "$pid"; then
        name=$(awk '/^xfer-perf server:/ { print $3; exit }' "$slog")
        run_client "$clog" "${XFER_ENV[@]}" -- "$XFER" "${opts[@]}" client "$name" || status=fail
    else
        {
            if kill -0 "$pid" 2>/dev/null; then
                echo "server printed no 'xfer-perf server: NAME' line within ${READY_TIMEOUT}s; its output:"
            else
                echo "server exited without printing 'xfer-perf server: NAME'; its output:"
            fi
            cat "$slog"
        } >"$clog"
        status=fail
    fi
    finish_server "$pid" || status=fail
    note xfer "$test" "$rep" "$status" "$clog" "$slog" -
    if [[ $status != ok ]]; then
        # It will not do better next time: stop trying, say so loudly.
        HAVE_XFER=0
        XFER_NOTE="xfer-perf $test over $PROVIDER failed (run $rep): $(grep -v '^\s*$' "$clog" | tail -n 1)"
        log "FAIL: $XFER_NOTE"
        log "xfer-perf client output (last lines):"
        tail -n 15 "$clog" >&2
        log "xfer-perf server output (last lines):"
        tail -n 15 "$slog" >&2
    fi
}

START=$SECONDS
log "device $DEV GID index $GID addr $ADDR; $REPS repetition(s); servers on CPU $SERVER_CPU, clients on CPU $CLIENT_CPU"
if [[ $HAVE_XFER = 1 ]]; then
    log "xfer-info for provider $PROVIDER:"
    env "${XFER_ENV[@]}" timeout 60 "$(dirname "$XFER")/xfer-info" 2>&1 | sed -n '1,/^$/p;/^open_default/,/^$/p' >&2 || true
fi
for ((rep = 1; rep <= REPS; rep++)); do
    log "repetition $rep/$REPS: latency ($LAT_SIZE B, $LAT_ITERS iterations)"
    perftest_run "$rep" ib_send_lat ib_send_lat "$LAT_SIZE" "$LAT_ITERS"
    # perftest sends nothing inline on rxe by default ("Max inline data: 0"); xfer, UCX do.
    perftest_run "$rep" ib_send_lat_inline ib_send_lat "$LAT_SIZE" "$LAT_ITERS" -I "$LAT_SIZE"
    ucx_run "$rep" tag_lat "$LAT_SIZE" "$LAT_ITERS" "$LAT_WARMUP"
    fi_run "$rep" 1
    fi_run "$rep" "$LAT_ITERS"
    [[ $HAVE_XFER = 1 ]] && xfer_run "$rep" tag_lat "$LAT_SIZE" "$LAT_ITERS" "$LAT_WARMUP"
    log "repetition $rep/$REPS: bandwidth ($BW_SIZE B, $BW_ITERS messages)"
    perftest_run "$rep" ib_send_bw ib_send_bw "$BW_SIZE" "$BW_ITERS"
    perftest_run "$rep" ib_write_bw ib_write_bw "$BW_SIZE" "$BW_ITERS"
    ucx_run "$rep" tag_bw "$BW_SIZE" "$BW_ITERS" "$BW_WARMUP"
    [[ $HAVE_XFER = 1 ]] && xfer_run "$rep" tag_bw "$BW_SIZE" "$BW_ITERS" "$BW_WARMUP"
done
ELAPSED=$((SECONDS - START))

# ------------------------------------------------------------------ report
pkg_version() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo "not installed"; }
R_DATE=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
R_KERNEL=$(uname -r)
R_NCPU=$(nproc)
R_CPU=$(awk -F: '/^model name/ { sub(/^[ \t]+/, "", $2); print $2; exit }' /proc/cpuinfo)
R_PERFTEST=$(pkg_version perftest)
R_UCX=$(pkg_version ucx-utils)
R_RDMA=$(pkg_version rdma-core)
R_FI=$(pkg_version libfabric-bin)
R_MTU=$(ibv_devinfo -d "$DEV" 2>/dev/null | awk '/active_mtu/ { print $2; exit }')
export R_DATE R_KERNEL R_NCPU R_CPU R_PERFTEST R_UCX R_RDMA R_FI R_MTU
export R_REPS=$REPS R_LAT_SIZE=$LAT_SIZE R_BW_SIZE=$BW_SIZE R_LAT_ITERS=$LAT_ITERS R_BW_ITERS=$BW_ITERS
export R_XFER_NOTE=$XFER_NOTE R_PROVIDER=$PROVIDER R_ELAPSED=$ELAPSED R_COMMIT=$COMMIT R_NOTE=$NOTE
export R_DEV=$DEV R_GID=$GID R_ADDR=$ADDR R_SERVER_CPU=$SERVER_CPU R_CLIENT_CPU=$CLIENT_CPU
"$PY" - "$MANIFEST" "$CMDS" >"$OUT" <<'PY'
import json, math, os, sys

E = os.environ
manifest, cmds_file = sys.argv[1], sys.argv[2]
reps = int(E["R_REPS"])
lat_size, bw_size = int(E["R_LAT_SIZE"]), int(E["R_BW_SIZE"])
provider = E["R_PROVIDER"]

def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""

def numbers(line):
    try:
        return [float(x) for x in line.split()]
    except ValueError:
        return None

def perftest_lat(text, mhz=None):
    # #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%  (usec, half round
    # trip; CPU cycles with -C, converted here with the kernel's TSC rate `mhz`)
    for line in text.splitlines():
        v = numbers(line)
        if v and len(v) >= 6:
            if any(math.isinf(x) or math.isnan(x) for x in v[2:6]):
                return None
            d = 1.0 if mhz is None else mhz
            return {"iters": v[1], "min_us": v[2] / d, "max_us": v[3] / d, "p50_us": v[4] / d,
                    "avg_us": v[5] / d, "p99_us": v[7] / d if len(v) > 7 else None,
                    "cycles": mhz is not None}
    return None

def perftest_bw(text):
    # #bytes #iterations BW_peak BW_average[MB/sec = MiB/s] MsgRate[Mpps]
    for line in text.splitlines():
        v = numbers(line)
        if v and len(v) >= 5:
            return {"iters": v[1], "peak_mib_s": v[2], "mib_s": v[3], "msg_rate": v[4] * 1e6}
    return None

def ucx_final(text):
    # Final: iters p50 avg(last) avg(overall) bw(last) bw(overall) mr(last) mr(overall)
    for line in text.splitlines():
        if line.startswith("Final:"):
            v = numbers(" ".join(line.split()[1:9]))
            if v and len(v) == 8:
                return {"iters": v[0], "p50_us": v[1], "avg_us": v[3], "mib_s": v[5], "msg_rate": v[7]}
    return None

def fi_row(text):
    # bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
    for line in text.splitlines():
        f = line.split()
        if len(f) == 8 and f[4].endswith("s") and numbers(f[6]):
            return {"time_s": float(f[4][:-1]), "usec_xfer": float(f[6])}
    return None

def xfer_json(text):
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    return None

results, failures, fi_runs = {}, [], {}
with open(manifest) as f:
    for line in f:
        tool, test, rep, status, clog, slog, extra = line.rstrip("\n").split("\t")
        mhz = float(extra.split("=", 1)[1]) if extra.startswith("cycles_mhz=") else None
        text = read(clog)
        key = (tool, test)
        r = None
        if status == "ok":
            if tool in ("ib_send_lat", "ib_send_lat_inline"):
                r = perftest_lat(text, mhz)
            elif tool in ("ib_send_bw", "ib_write_bw"):
                r = perftest_bw(text)
            elif tool == "ucx":
                r = ucx_final(text)
            elif tool == "fi":
                r = fi_row(text)
                if r is not None:
                    fi_runs[(int(rep), int(extra.split("=", 1)[1]))] = r
                    continue
            elif tool == "xfer":
                r = xfer_json(text)
                if r is not None and r.get("provider") != provider:
                    failures.append((tool, test, rep, [f"xfer-perf ran over {r.get('provider')!r}, not {provider!r}"]))
                    continue
            if r is None:
                failures.append((tool, test, rep, ["no result line in its output:"] + text.strip().splitlines()[-6:]))
                continue
            results.setdefault(key, []).append(dict(r, rep=int(rep)))
        else:
            tail = text.strip().splitlines()[-10:]
            if slog != "-":
                stail = read(slog).strip().splitlines()[-6:]
                if stail:
                    tail += ["(server:)"] + stail
            failures.append((tool, test, rep, tail))

# fi_pingpong: usec/xfer = elapsed / (2 iterations), half a round trip, but elapsed
# includes the connection setup: half_rtt = (elapsed(N) - elapsed(1)) / (2 (N - 1)).
for (rep, n), r in sorted(fi_runs.items()):
    if n == 1:
        continue
    one = fi_runs.get((rep, 1))
    d = {"raw_us": r["usec_xfer"], "iters": n, "rep": rep}
    if one is not None:
        d["setup_ms"] = one["usec_xfer"] * 2 / 1000.0
        d["avg_us"] = (r["usec_xfer"] * 2 * n - one["usec_xfer"] * 2) / (2 * (n - 1))
    else:
        d["avg_us"] = r["usec_xfer"]
    results.setdefault(("fi", "lat"), []).append(d)

def median(key, field):
    runs = [r for r in results.get(key, []) if r.get(field) is not None]
    if not runs:
        return None, []
    runs.sort(key=lambda r: r[field])
    return runs[(len(runs) - 1) // 2], runs

def val(key, field):
    r, _ = median(key, field)
    return None if r is None else r[field]

def fmt(v, nd=2):
    return "n/a" if v is None else f"{v:.{nd}f}"

def ratio(a, b):
    return "n/a" if a is None or not b else f"{a / b:.2f}x"

def verdict(a, b, op, target):
    if a is None or not b:
        return "n/a"
    x = a / b
    ok = x <= target if op == "<=" else x >= target
    return f"{'yes' if ok else 'NO'} ({op} {target}x)"

xl = ("xfer", "tag_lat"); xb = ("xfer", "tag_bw")
il = ("ib_send_lat", "ib_send_lat"); ili = ("ib_send_lat_inline", "ib_send_lat"); isb = ("ib_send_bw", "ib_send_bw"); iwb = ("ib_write_bw", "ib_write_bw")
ul = ("ucx", "tag_lat"); ub = ("ucx", "tag_bw")
fl = ("fi", "lat")

x_p50, i_p50, u_p50 = val(xl, "p50_us"), val(il, "p50_us"), val(ul, "p50_us")
x_avg, i_avg, u_avg = val(xl, "avg_us"), val(il, "avg_us"), val(ul, "avg_us")
ii_p50, ii_avg = val(ili, "p50_us"), val(ili, "avg_us")
f_avg = val(fl, "avg_us")
x_bw, is_bw, iw_bw, u_bw = val(xb, "mib_s"), val(isb, "mib_s"), val(iwb, "mib_s"), val(ub, "mib_s")

o = []
p = o.append
xname = "xfer" if provider == "verbs" else f"xfer ({provider}!)"
p("# xfer over verbs vs perftest, UCX and libfabric (Soft-RoCE guest, TCG)")
p("")
p(f"- Date: {E['R_DATE']}" + (f"; source {E['R_COMMIT']}" if E.get("R_COMMIT") else ""))
p(f"- Guest: kernel `{E['R_KERNEL']}`, {E['R_NCPU']} vCPUs ({E['R_CPU']}, QEMU TCG: no KVM), "
  f"device `{E['R_DEV']}` (rdma_rxe on dummy0, {E['R_ADDR']}), RoCE v2 GID index {E['R_GID']}, "
  f"active MTU {E['R_MTU'] or '?'}")
if E.get("R_NOTE"):
    p(f"- {E['R_NOTE']}")
p(f"- Packages: perftest {E['R_PERFTEST']}, ucx-utils {E['R_UCX']}, rdma-core {E['R_RDMA']}, "
  f"libfabric-bin {E['R_FI']}")
p(f"- Pinning: servers `taskset -c {E['R_SERVER_CPU']}`, clients `taskset -c {E['R_CLIENT_CPU']}`; "
  f"{reps} repetition(s), interleaved across tools; each figure is the median run. "
  f"Took {E['R_ELAPSED']} s.")
p(f"- xfer-perf: `XFER_PROVIDER={provider}`" + ("" if provider == "verbs" else
  " -- NOT the verbs provider: this run only checks the script's handling of xfer-perf"))
p("")
p("## Summary")
p("")
p(f"| measure | perftest | UCX rc_v | {xname} | xfer/perftest | target met | xfer/UCX |")
p("|---|---:|---:|---:|---:|---|---:|")
p(f"| latency {lat_size} B, p50 µs | {fmt(i_p50)} | {fmt(u_p50)} | {fmt(x_p50)} | {ratio(x_p50, i_p50)} | "
  f"{verdict(x_p50, i_p50, '<=', 1.15)} | {ratio(x_p50, u_p50)} |")
p(f"| latency {lat_size} B, avg µs | {fmt(i_avg)} | {fmt(u_avg)} | {fmt(x_avg)} | {ratio(x_avg, i_avg)} | | "
  f"{ratio(x_avg, u_avg)} |")
p(f"| latency {lat_size} B, p50 µs, perftest inline (`-I {lat_size}`) | {fmt(ii_p50)} | | | "
  f"{ratio(x_p50, ii_p50)} | | |")
p(f"| latency {lat_size} B, avg µs, perftest inline | {fmt(ii_avg)} | | | {ratio(x_avg, ii_avg)} | | |")
p(f"| latency {lat_size} B, avg µs, **fi_pingpong** `-p verbs -e msg` in the perftest column | {fmt(f_avg)} | | "
  f"{fmt(x_avg)} | {ratio(x_avg, f_avg)} | | |")
p(f"| bandwidth {bw_size // 1024} KiB, MiB/s | {fmt(is_bw, 1)} | {fmt(u_bw, 1)} | {fmt(x_bw, 1)} | "
  f"{ratio(x_bw, is_bw)} | {verdict(x_bw, is_bw, '>=', 0.9)} | {ratio(x_bw, u_bw)} |")
p(f"| RDMA write {bw_size // 1024} KiB, MiB/s | {fmt(iw_bw, 1)} (ib_write_bw) | | | {ratio(x_bw, iw_bw)} | | |")
if E["R_XFER_NOTE"]:
    p("")
    p(f"**xfer-perf: n/a -- {E['R_XFER_NOTE']}**")
p("")
p("perftest: `ib_send_lat` (latency: its t_typical, the median, and t_avg; perftest "
  "posts nothing inline on rxe unless asked, the inline rows ask with `-I`), `ib_send_bw` "
  "(bandwidth, BW average), `ib_write_bw` (the RDMA-write ceiling, for reference); "
  "UCX: `ucx_perftest tag_lat`/`tag_bw`, `Final:` line (p50 over the last 2048 iterations "
  "only; average and bandwidth overall); libfabric: `fi_pingpong -p verbs -e msg` (untagged "
  "send/recv on an RC QP connected by rdma_cm; `-e rdm`, verbs;ofi_rxm, fails in `fi_enable` with "
  "EINVAL on rxe), an average over all iterations with the connection setup taken out "
  "(each repetition also runs `-I 1`: (elapsed(N) - elapsed(1)) / (2 (N - 1))); xfer: `xfer-perf --json` `tag_lat` p50/avg over "
  "all timed iterations, `tag_bw` MiB/s. Latency is half a round trip everywhere; "
  "MiB = 2^20 bytes (perftest's and UCX's \"MB/sec\" are MiB/s). Targets: xfer latency "
  "<= 1.15x ib_send_lat, xfer bandwidth >= 0.9x ib_send_bw.")
p("")
p("## Every run")
p("")
p("| tool | test | figure | median | per run |")
p("|---|---|---|---:|---|")
rows = [("ib_send_lat", il, "p50_us", "p50 µs"), ("ib_send_lat", il, "avg_us", "avg µs"),
        ("ib_send_lat", il, "p99_us", "p99 µs"),
        ("ib_send_lat -I (inline)", ili, "p50_us", "p50 µs"), ("ib_send_lat -I (inline)", ili, "avg_us", "avg µs"),
        ("UCX", ul, "p50_us", "p50 µs"), ("UCX", ul, "avg_us", "avg µs"),
        ("fi_pingpong -e msg", fl, "avg_us", "avg µs"), ("fi_pingpong -e msg", fl, "raw_us", "raw avg µs (setup in)"),
        ("fi_pingpong -e msg", fl, "setup_ms", "setup ms"),
        ("xfer-perf", xl, "p50_us", "p50 µs"), ("xfer-perf", xl, "avg_us", "avg µs"),
        ("xfer-perf", xl, "p99_us", "p99 µs"),
        ("ib_send_bw", isb, "mib_s", "MiB/s"), ("ib_write_bw", iwb, "mib_s", "MiB/s"),
        ("UCX", ub, "mib_s", "MiB/s"), ("xfer-perf", xb, "mib_s", "MiB/s")]
for label, key, field, what in rows:
    r, runs = median(key, field)
    nd = 1 if field == "mib_s" else 2
    per = ", ".join(fmt(x[field], nd) + (" (c)" if x.get("cycles") else "")
                    for x in sorted(runs, key=lambda x: x["rep"]))
    test = key[1] if key[0] in ("ucx", "xfer") else ""
    nd = 0 if field == "setup_ms" else nd
    p(f"| {label} | {test} | {what} | {fmt(r[field] if r else None, nd)} | {per} |")
# Ratios within each repetition (the tools of one repetition ran seconds apart, so they
# share the host's conditions more than runs of different repetitions do).
def per_rep(a_key, b_key, field):
    a = {r["rep"]: r[field] for r in results.get(a_key, []) if r.get(field) is not None}
    b = {r["rep"]: r[field] for r in results.get(b_key, []) if r.get(field) is not None}
    rs = [a[k] / b[k] for k in sorted(a) if k in b and b[k]]
    if not rs:
        return "n/a", "n/a"
    med = sorted(rs)[(len(rs) - 1) // 2]
    return f"{med:.2f}x", ", ".join(f"{x:.2f}" for x in rs)
p("")
p("| ratio within each repetition | median | per repetition |")
p("|---|---:|---|")
for label, a, b, field in (("xfer / ib_send_lat, p50", xl, il, "p50_us"),
                           ("xfer / ib_send_lat -I, p50", xl, ili, "p50_us"),
                           ("xfer / UCX tag_lat, p50", xl, ul, "p50_us"),
                           ("xfer / fi_pingpong, avg", xl, fl, "avg_us"),
                           ("xfer / ib_send_bw, MiB/s", xb, isb, "mib_s"),
                           ("xfer / UCX tag_bw, MiB/s", xb, ub, "mib_s")):
    med, per = per_rep(a, b, field)
    p(f"| {label} | {med} | {per} |")
if any(r.get("cycles") for r in results.get(il, []) + results.get(ili, [])):
    p("")
    p("(c): ib_send_lat printed inf/nan (it failed to calibrate the CPU clock), so that run was "
      "repeated with `-C` (CPU cycles) and converted with the kernel's TSC rate from /proc/cpuinfo.")
if failures:
    p("")
    p("## Failed runs")
    p("")
    groups = {}
    for tool, test, rep, tail in failures:
        groups.setdefault((tool, test, tuple(tail)), []).append(rep)
    for (tool, test, tail), rs in groups.items():
        p(f"- {tool} {test}, run {', '.join(rs)}:")
        p("")
        p("  ```")
        for l in tail or ("(no output)",):
            p("  " + l)
        p("  ```")
p("")
p("## Commands")
p("")
p("PORT: a fresh TCP port per run (the out-of-band exchange); NAME: the address the "
  "xfer-perf server printed.")
p("")
p("```")
seen = set()
for line in open(cmds_file):
    line = line.rstrip("\n")
    if line not in seen:
        seen.add(line)
        p(line)
p("```")
print("\n".join(o))
sys.exit(3 if failures else 0)
PY
report_rc=$?
cat "$OUT"
log "report written to $OUT (raw logs in $RAW)"
case $report_rc in
0) ;;
3) ;;
*) log "FAIL: writing the report failed (python exit $report_rc)"; exit 1 ;;
esac
failed=0
if [[ $report_rc = 3 ]]; then
    log "FAIL: some runs failed or gave no figures: see 'Failed runs' in the report"
    failed=1
fi
if [[ -n $XFER_NOTE ]]; then
    log "FAIL: xfer-perf over $PROVIDER: $XFER_NOTE"
    failed=1
fi
if [[ $failed = 0 ]]; then log "PASS: every tool measured"; fi
exit "$failed"

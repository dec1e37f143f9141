#!/usr/bin/env bash
# compare.sh - measure xfer-perf against its peers on loopback, in one run.
#
# Peers: the raw busy-polling TCP floor (tcp-floor, this crate), UCX
# (ucx_perftest, UCX_TLS=tcp,self) and libfabric (fi_pingpong, tcp provider,
# rdm endpoint, tagged). Every server is pinned with `taskset -c 0`, every
# client with `taskset -c 1`; all traffic goes to 127.0.0.1. Each measurement
# is repeated (3 times by default, interleaved across tools) and the median
# run is reported. See bench/README.md for what each figure means.
#
# At the end, xfer-perf sweeps every size from 1 B to 4 MiB (tag_lat, tag_bw)
# and bench/plot.py draws that sweep and the peers' medians against message
# size (PREFIX-latency.png, PREFIX-bandwidth.png; matplotlib from pip).
#
# usage: bench/compare.sh [--out FILE] [--reps N] [--no-install] [--keep] [--plot PREFIX | --no-plot]

set -euo pipefail

usage() {
    cat <<'EOF'
usage: bench/compare.sh [--out FILE] [--reps N] [--no-install] [--keep] [--plot PREFIX | --no-plot]
  --out FILE     Markdown report path (default bench/results/loopback.md)
  --plot PREFIX  plots to PREFIX-latency.png and PREFIX-bandwidth.png (default: FILE without .md)
  --no-plot      no xfer-perf size sweep, no plots
  --reps N       repetitions of every measurement; the median run is reported (3)
  --no-install   do not apt-get install missing peers (their rows become "not available")
  --keep         keep the raw logs (their directory is printed)
environment: SERVER_CPU (0), CLIENT_CPU (1), LAT_ITERS (20000), LAT_WARMUP (2000),
  XFER_PERF=PATH  use this xfer-perf binary instead of building one
EOF
}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT="$ROOT/bench/results/loopback.md"
REPS=3
INSTALL=1
KEEP=0
PLOT=
DO_PLOT=1
while [[ $# -gt 0 ]]; do
    case "$1" in
        --out) [[ $# -ge 2 ]] || { usage >&2; exit 2; }
               OUT=$(realpath -m -- "$2"); shift 2 ;;
        --reps) [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || { usage >&2; exit 2; }
                REPS=$2; shift 2 ;;
        --no-install) INSTALL=0; shift ;;
        --keep) KEEP=1; shift ;;
        --plot) [[ $# -ge 2 ]] || { usage >&2; exit 2; }
                PLOT=$(realpath -m -- "$2"); shift 2 ;;
        --no-plot) DO_PLOT=0; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "compare.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
    esac
done
cd "$ROOT"
PLOT=${PLOT:-${OUT%.md}}

# ---------------------------------------------------------------- settings
# xfer endpoints listen on loopback, like the peers they are compared with.
export XFER_TCP_ADDR=${XFER_TCP_ADDR:-127.0.0.1}
# TCP against TCP: the default provider (shm+tcp) would carry these same-host
# peers over shared memory (bench/shm-compare.sh measures that).
export XFER_PROVIDER=${XFER_PROVIDER:-tcp}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
LAT_SIZES=(8 64 256)
LAT_ITERS=${LAT_ITERS:-20000}
LAT_WARMUP=${LAT_WARMUP:-2000}
BW_SIZES=(65536 1048576 4194304)
# Messages per bandwidth run: about 1.2-2 GiB per size, ~0.3-1 s on loopback.
declare -A BW_ITERS=([65536]=20000 [1048576]=2000 [4194304]=500)
# Small-message rate: 8 B streamed with at most 64 messages in flight (the floor's and
# xfer-perf's default window; UCX's -O).
RATE_SIZE=8
RATE_ITERS=${RATE_ITERS:-200000}
RATE_WINDOW=64
# UCX on the loopback device only (by default it also opens lanes on eth0).
UCX_ENV=("UCX_TLS=tcp,self" "UCX_NET_DEVICES=lo")
SERVER_TIMEOUT=180   # hard bound on any server process
CLIENT_TIMEOUT=120   # hard bound on any client process
READY_TIMEOUT=20     # seconds to wait for a server to be ready
EXIT_TIMEOUT=10      # seconds to wait for a server to exit after its client

FLOOR=${CARGO_TARGET_DIR:-target}/release/tcp-floor
XFER=${CARGO_TARGET_DIR:-target}/release/xfer-perf

WORK=$(mktemp -d /tmp/xfer-compare.XXXXXX)
RAW="$WORK/raw"
MANIFEST="$WORK/manifest.tsv"
CMDS="$WORK/commands.txt"
mkdir -p "$RAW"
: >"$MANIFEST"
: >"$CMDS"
SERVER_PIDS=()

log() { printf '[compare] %s\n' "$*" >&2; }
die() { printf '[compare] error: %s\n' "$*" >&2; exit 1; }

cleanup() {
    local pid
    for pid in "${SERVER_PIDS[@]}"; do
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
        fi
    done
    for pid in "${SERVER_PIDS[@]}"; do
        timeout 5 tail --pid="$pid" -f /dev/null 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    done
    if [[ $KEEP -eq 1 ]]; then
        log "raw logs kept in $WORK"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ------------------------------------------------------------ prerequisites
if [[ $(nproc) -lt 2 ]]; then
    log "only $(nproc) CPU: server and client share CPU $SERVER_CPU"
    CLIENT_CPU=$SERVER_CPU
fi
for tool in python3 taskset timeout lscpu cargo; do
    command -v "$tool" >/dev/null || die "$tool is required"
done

missing=()
command -v ucx_perftest >/dev/null || missing+=(ucx-utils)
command -v fi_pingpong >/dev/null || missing+=(libfabric-bin)
if [[ ${#missing[@]} -gt 0 ]]; then
    if [[ $INSTALL -eq 1 && $(id -u) -eq 0 ]]; then
        log "installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        timeout 600 apt-get update -qq >&2 || log "apt-get update failed"
        timeout 900 apt-get install -y -qq "${missing[@]}" >&2 || log "apt-get install ${missing[*]} failed"
    else
        log "missing ${missing[*]} (not installing): those columns will say not available"
    fi
fi
HAVE_UCX=0; command -v ucx_perftest >/dev/null && HAVE_UCX=1
HAVE_FI=0; command -v fi_pingpong >/dev/null && HAVE_FI=1

log "building xfer-bench"
timeout 1200 cargo build --release -q -p xfer-bench >&2 || die "cargo build --release -p xfer-bench failed"
[[ -x $FLOOR ]] || die "$FLOOR was not built"

# xfer-perf: build it if some workspace package has that binary; tolerate failure,
# and never fall back to a stale binary from an earlier build.
HAVE_XFER=0
XFER_NOTE="not available"

# Prints the name of the workspace package that has an `xfer-perf` binary, if any.
xfer_perf_package() {
    timeout 120 cargo metadata --no-deps --format-version 1 2>/dev/null | python3 -c '
import json, sys
try:
    meta = json.load(sys.stdin)
except ValueError:
    sys.exit(0)
for p in meta["packages"]:
    if any(t["name"] == "xfer-perf" and "bin" in t["kind"] for t in p["targets"]):
        print(p["name"])
        break
' || true
}

if [[ -n ${XFER_PERF:-} ]]; then
    # A prebuilt xfer-perf given by the caller: used as is, nothing is built.
    XFER=$XFER_PERF
    if [[ -x $XFER ]]; then
        HAVE_XFER=1
    else
        XFER_NOTE="not available (XFER_PERF=$XFER is not executable)"
    fi
else
    xfer_pkg=$(xfer_perf_package)
    if [[ -z $xfer_pkg ]]; then
        XFER_NOTE="not available (no xfer-perf binary in the workspace)"
        log "no xfer-perf binary target in the workspace: its columns will say not available"
    elif log "building xfer-perf (package $xfer_pkg)" &&
        timeout 1200 cargo build --release -q -p "$xfer_pkg" --bin xfer-perf >&2 && [[ -x $XFER ]]; then
        HAVE_XFER=1
    else
        XFER_NOTE="not available (build failed)"
        log "xfer-perf did not build: its columns will say not available"
    fi
fi

# ------------------------------------------------------------------ helpers
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Records a command for the report, with the port number replaced by PORT.
record() { # port words...
    local port=$1; shift
    local line="$*"
    if [[ -n $port ]]; then line=$(sed -E "s/\\b$port\\b/PORT/g" <<<"$line"); fi
    printf '%s\n' "$line" >>"$CMDS"
}

# True once something listens on TCP port $1 (read from /proc, so the probe
# does not connect and steal the server's single accept).
listening() {
    local hex
    hex=$(printf '%04X' "$1")
    awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { found = 1 } END { exit !found }' \
        /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

wait_listening() { # port pid
    local deadline=$((SECONDS + READY_TIMEOUT))
    while ! listening "$1"; do
        kill -0 "$2" 2>/dev/null || return 1
        [[ $SECONDS -lt $deadline ]] || return 1
        sleep 0.05
    done
}

wait_line() { # file regex pid
    local deadline=$((SECONDS + READY_TIMEOUT))
    while ! grep -qE "$2" "$1" 2>/dev/null; do
        kill -0 "$3" 2>/dev/null || return 1
        [[ $SECONDS -lt $deadline ]] || return 1
        sleep 0.05
    done
}

SERVER_PID=
start_server() { # log env-words... -- command...
    local logf=$1; shift
    local envs=()
    while [[ $1 != -- ]]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" timeout "$SERVER_TIMEOUT" taskset -c "$SERVER_CPU" "$@" >"$logf" 2>&1 &
    SERVER_PID=$!
    SERVER_PIDS+=("$SERVER_PID")
}

# Waits (bounded) for the server to exit by itself after its client, then kills it.
finish_server() {
    local pid=$1
    timeout "$EXIT_TIMEOUT" tail --pid="$pid" -f /dev/null 2>/dev/null || true
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        timeout 5 tail --pid="$pid" -f /dev/null 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}

run_client() { # log env-words... -- command...
    local logf=$1; shift
    local envs=()
    while [[ $1 != -- ]]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" timeout "$CLIENT_TIMEOUT" taskset -c "$CLIENT_CPU" "$@" >"$logf" 2>&1
}

# manifest: tool test size rep extra status file
note() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$MANIFEST"; }

# ------------------------------------------------------------ measurements
floor_run() { # rep test sizes iters warmup tag
    local rep=$1 test=$2 sizes=$3 iters=$4 warmup=$5 tag=$6
    local slog="$RAW/floor-$tag-r$rep.server" clog="$RAW/floor-$tag-r$rep.out" port status=ok
    local opts=(--json --test "$test" --sizes "$sizes" --iters "$iters" --warmup "$warmup")
    start_server "$slog" -- "$FLOOR" "${opts[@]}" server --port 0
    local pid=$SERVER_PID
    if wait_line "$slog" '^listening on [0-9]+' "$pid"; then
        port=$(awk '/^listening on/ { print $3; exit }' "$slog")
        record "$port" "taskset -c $SERVER_CPU $FLOOR ${opts[*]} server --port 0"
        record "$port" "taskset -c $CLIENT_CPU $FLOOR ${opts[*]} client 127.0.0.1:$port"
        run_client "$clog" -- "$FLOOR" "${opts[@]}" client "127.0.0.1:$port" || status=fail
    else
        cp "$slog" "$clog"; status=fail
    fi
    finish_server "$pid"
    note floor "$test" "$sizes" "$rep" - "$status" "$clog"
}

xfer_run() { # rep test sizes iters warmup tag
    local rep=$1 test=$2 sizes=$3 iters=$4 warmup=$5 tag=$6
    local slog="$RAW/xfer-$tag-r$rep.server" clog="$RAW/xfer-$tag-r$rep.out" name status=ok
    local opts=(--json --test "$test" --sizes "$sizes" --iters "$iters" --warmup "$warmup")
    start_server "$slog" -- "$XFER" "${opts[@]}" server
    local pid=$SERVER_PID
    record "" "taskset -c $SERVER_CPU $XFER ${opts[*]} server"
    if wait_line "$slog" '^xfer-perf server: [0-9A-Fa-fx]+' "$pid"; then
        name=$(awk '/^xfer-perf server:/ { print $3; exit }' "$slog")
        record "" "taskset -c $CLIENT_CPU $XFER ${opts[*]} client NAME"
        run_client "$clog" -- "$XFER" "${opts[@]}" client "$name" || status=fail
    else
        # A server that never gets ready will not next time either: stop trying.
        if kill -0 "$pid" 2>/dev/null; then
            echo "server printed no 'xfer-perf server: NAME' line within ${READY_TIMEOUT}s; its output:"
        else
            echo "server exited without printing an 'xfer-perf server: NAME' line; its output:"
        fi >"$clog"
        cat "$slog" >>"$clog"
        status=fail
        HAVE_XFER=0
        XFER_NOTE="not available (server did not start)"
        log "xfer-perf server did not start: skipping xfer-perf from now on"
    fi
    finish_server "$pid"
    note xfer "$test" "$sizes" "$rep" - "$status" "$clog"
}

ucx_run() { # rep test size iters warmup [extra client options...]
    local rep=$1 test=$2 size=$3 iters=$4 warmup=$5
    local extra=("${@:6}")
    local slog="$RAW/ucx-$test-$size-r$rep.server" clog="$RAW/ucx-$test-$size-r$rep.out" status=ok port
    port=$(free_port)
    start_server "$slog" "${UCX_ENV[@]}" -- ucx_perftest -p "$port"
    local pid=$SERVER_PID
    local copts=(127.0.0.1 -p "$port" -t "$test" -s "$size" -n "$iters" -w "$warmup" "${extra[@]}")
    record "$port" "${UCX_ENV[*]} taskset -c $SERVER_CPU ucx_perftest -p $port"
    record "$port" "${UCX_ENV[*]} taskset -c $CLIENT_CPU ucx_perftest ${copts[*]}"
    if wait_listening "$port" "$pid"; then
        run_client "$clog" "${UCX_ENV[@]}" -- ucx_perftest "${copts[@]}" || status=fail
    else
        cp "$slog" "$clog"; status=fail
    fi
    finish_server "$pid"
    note ucx "$test" "$size" "$rep" - "$status" "$clog"
}

fi_run() { # rep size iters
    local rep=$1 size=$2 iters=$3
    local slog="$RAW/fi-$size-n$iters-r$rep.server" clog="$RAW/fi-$size-n$iters-r$rep.out" status=ok port
    port=$(free_port)
    local opts=(-p tcp -e rdm -m tagged -d lo -S "$size" -I "$iters")
    start_server "$slog" -- fi_pingpong "${opts[@]}" -B "$port"
    local pid=$SERVER_PID
    record "$port" "taskset -c $SERVER_CPU fi_pingpong ${opts[*]} -B $port"
    record "$port" "taskset -c $CLIENT_CPU fi_pingpong ${opts[*]} -P $port 127.0.0.1"
    if wait_listening "$port" "$pid"; then
        run_client "$clog" -- fi_pingpong "${opts[@]}" -P "$port" 127.0.0.1 || status=fail
    else
        cp "$slog" "$clog"; status=fail
    fi
    finish_server "$pid"
    note "fi" tag_lat "$size" "$rep" "$iters" "$status" "$clog"
}

# The sweep behind the plots: every default size (1 B to 4 MiB), default iterations.
SWEEP="$WORK/sweep.jsonl"
xfer_sweep() {
    local slog="$RAW/xfer-sweep.server" name
    local opts=(--json --test "tag_lat,tag_bw")
    start_server "$slog" -- "$XFER" "${opts[@]}" server
    local pid=$SERVER_PID
    record "" "taskset -c $SERVER_CPU $XFER ${opts[*]} server"
    if wait_line "$slog" '^xfer-perf server: [0-9A-Fa-fx]+' "$pid"; then
        name=$(awk '/^xfer-perf server:/ { print $3; exit }' "$slog")
        record "" "taskset -c $CLIENT_CPU $XFER ${opts[*]} client NAME"
        run_client "$SWEEP" -- "$XFER" "${opts[@]}" client "$name" || log "the xfer-perf sweep failed"
    else
        log "the xfer-perf sweep's server did not start"
    fi
    finish_server "$pid"
}

join_by_comma() { local IFS=,; echo "$*"; }

LOAD_START=$(cut -d" " -f1-3 /proc/loadavg)
START=$SECONDS
for ((rep = 1; rep <= REPS; rep++)); do
    log "repetition $rep/$REPS: latency"
    floor_run "$rep" lat "$(join_by_comma "${LAT_SIZES[@]}")" "$LAT_ITERS" "$LAT_WARMUP" lat
    if [[ $HAVE_XFER -eq 1 ]]; then
        xfer_run "$rep" tag_lat "$(join_by_comma "${LAT_SIZES[@]}")" "$LAT_ITERS" "$LAT_WARMUP" lat
    fi
    for size in "${LAT_SIZES[@]}"; do
        if [[ $HAVE_UCX -eq 1 ]]; then ucx_run "$rep" tag_lat "$size" "$LAT_ITERS" "$LAT_WARMUP"; fi
        if [[ $HAVE_FI -eq 1 ]]; then
            # fi_pingpong has no warm-up and times the lazy rdm connection setup
            # too: a 1-iteration run measures that cost so it can be taken out.
            fi_run "$rep" "$size" 1
            fi_run "$rep" "$size" "$LAT_ITERS"
        fi
    done
    log "repetition $rep/$REPS: bandwidth"
    for size in "${BW_SIZES[@]}"; do
        iters=${BW_ITERS[$size]}
        warmup=$((iters / 10))
        floor_run "$rep" bw "$size" "$iters" "$warmup" "bw-$size"
        if [[ $HAVE_XFER -eq 1 ]]; then xfer_run "$rep" tag_bw "$size" "$iters" "$warmup" "bw-$size"; fi
        if [[ $HAVE_UCX -eq 1 ]]; then ucx_run "$rep" tag_bw "$size" "$iters" "$warmup"; fi
    done
    log "repetition $rep/$REPS: message rate"
    warmup=$((RATE_ITERS / 10))
    floor_run "$rep" bw "$RATE_SIZE" "$RATE_ITERS" "$warmup" rate
    if [[ $HAVE_XFER -eq 1 ]]; then xfer_run "$rep" tag_rate "$RATE_SIZE" "$RATE_ITERS" "$warmup" rate; fi
    if [[ $HAVE_UCX -eq 1 ]]; then ucx_run "$rep" tag_bw "$RATE_SIZE" "$RATE_ITERS" "$warmup" -O "$RATE_WINDOW"; fi
done
if [[ $DO_PLOT -eq 1 && $HAVE_XFER -eq 1 ]]; then
    log "xfer-perf size sweep for the plots"
    xfer_sweep
fi
ELAPSED=$((SECONDS - START))
LOAD_END=$(cut -d" " -f1-3 /proc/loadavg)

# ------------------------------------------------------------------ report
pkg_version() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo "not installed"; }
CPU_MODEL=$(lscpu | awk -F: '/^Model name/ { sub(/^[ \t]+/, "", $2); print $2; exit }')

mkdir -p "$(dirname "$OUT")"
REPORT_REPS=$REPS
REPORT_LAT_SIZES="${LAT_SIZES[*]}"
REPORT_BW_SIZES="${BW_SIZES[*]}"
REPORT_RATE_SIZE=$RATE_SIZE
REPORT_RATE_WINDOW=$RATE_WINDOW
REPORT_LAT_ITERS=$LAT_ITERS
REPORT_HAVE_XFER=$HAVE_XFER
REPORT_HAVE_UCX=$HAVE_UCX
REPORT_HAVE_FI=$HAVE_FI
REPORT_XFER_NOTE=$XFER_NOTE
REPORT_DATE=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
REPORT_KERNEL=$(uname -r)
REPORT_CPU=$CPU_MODEL
REPORT_NCPU=$(nproc)
REPORT_UCX=$(pkg_version ucx-utils)
REPORT_FI=$(pkg_version libfabric-bin)
REPORT_RUSTC=$(rustc --version 2>/dev/null || echo unknown)
REPORT_ELAPSED=$ELAPSED
REPORT_SERVER_CPU=$SERVER_CPU
REPORT_CLIENT_CPU=$CLIENT_CPU
REPORT_LOAD="$LOAD_START at start, $LOAD_END at end"
export REPORT_REPS REPORT_LAT_SIZES REPORT_BW_SIZES REPORT_RATE_SIZE REPORT_RATE_WINDOW REPORT_LAT_ITERS REPORT_HAVE_XFER REPORT_HAVE_UCX \
    REPORT_HAVE_FI REPORT_XFER_NOTE REPORT_DATE REPORT_KERNEL REPORT_CPU REPORT_NCPU REPORT_UCX \
    REPORT_FI REPORT_RUSTC REPORT_ELAPSED REPORT_SERVER_CPU REPORT_CLIENT_CPU REPORT_LOAD
PEERS="$WORK/peers.jsonl"
python3 - "$MANIFEST" "$CMDS" "$PEERS" >"$OUT" <<'PY'
import json, os, re, sys

E = os.environ
manifest, cmds_file, peers_file = sys.argv[1], sys.argv[2], sys.argv[3]
reps = int(E["REPORT_REPS"])
lat_sizes = [int(x) for x in E["REPORT_LAT_SIZES"].split()]
bw_sizes = [int(x) for x in E["REPORT_BW_SIZES"].split()]
rate_size = int(E["REPORT_RATE_SIZE"])
rate_window = int(E["REPORT_RATE_WINDOW"])
lat_iters = int(E["REPORT_LAT_ITERS"])
have = {"xfer": E["REPORT_HAVE_XFER"] == "1", "ucx": E["REPORT_HAVE_UCX"] == "1", "fi": E["REPORT_HAVE_FI"] == "1"}
xfer_note = E["REPORT_XFER_NOTE"]
meta = {k: E["REPORT_" + k.upper()] for k in
        ("date", "kernel", "cpu", "ncpu", "ucx", "fi", "rustc", "elapsed", "server_cpu", "client_cpu", "load")}

failures = []

def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""

def json_lines(text):
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out

def ucx_final(text):
    # Final: iters  p50  avg(last interval)  avg(overall)  bw(last)  bw(overall)  mr(last)  mr(overall)
    for line in text.splitlines():
        if line.startswith("Final:"):
            f = line.split()[1:]
            if len(f) >= 8:
                v = [float(x) for x in f[:8]]
                return {"iters": v[0], "p50_us": v[1], "avg_us": v[3], "mib_s": v[5], "msg_rate": v[7]}
    return None

def fi_row(text):
    # bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
    for line in text.splitlines():
        f = line.split()
        if len(f) == 8 and f[4].endswith("s") and re.match(r"^[0-9.]+$", f[6]):
            return {"time_s": float(f[4][:-1]), "mb_s": float(f[5]), "usec_xfer": float(f[6])}
    return None

# results[(tool, test, size)] = list of per-rep dicts
results = {}
def add(tool, test, size, rep, d):
    results.setdefault((tool, test, size), []).append(dict(d, rep=rep))

fi_runs = {}
with open(manifest) as f:
    for line in f:
        tool, test, sizes, rep, extra, status, path = line.rstrip("\n").split("\t")
        rep = int(rep)
        text = read(path)
        if status != "ok":
            failures.append((tool, test, sizes, rep, text.strip().splitlines()[-8:]))
            continue
        if tool in ("floor", "xfer"):
            rows = json_lines(text)
            if not rows:
                failures.append((tool, test, sizes, rep, ["no JSON output"] + text.strip().splitlines()[-5:]))
            for r in rows:
                t = "lat" if "lat" in r.get("test", "") else "bw"
                add(tool, t, int(r["size"]), rep, r)
        elif tool == "ucx":
            r = ucx_final(text)
            if r is None:
                failures.append((tool, test, sizes, rep, ["no Final: line"] + text.strip().splitlines()[-5:]))
            else:
                add(tool, "lat" if test == "tag_lat" else "bw", int(sizes), rep, r)
        elif tool == "fi":
            r = fi_row(text)
            if r is None:
                failures.append((tool, test, sizes, rep, ["no result row"] + text.strip().splitlines()[-5:]))
            else:
                fi_runs[(int(sizes), rep, int(extra))] = r

# fi_pingpong: usec/xfer = elapsed / (2 * iters), i.e. already half a round trip,
# but elapsed includes the lazy rdm connection setup (no warm-up). Take it out
# with the 1-iteration run of the same repetition:
#   half_rtt = (elapsed(N) - elapsed(1)) / (2 * (N - 1))
for (size, rep, n), r in sorted(fi_runs.items()):
    if n == 1:
        continue
    raw = r["usec_xfer"]
    one = fi_runs.get((size, rep, 1))
    d = {"raw_us": raw, "iters": n}
    if one is not None and n > 1:
        d["setup_ms"] = one["usec_xfer"] * 2 / 1000.0
        d["avg_us"] = (raw * 2 * n - one["usec_xfer"] * 2) / (2 * (n - 1))
    else:
        d["avg_us"] = raw
    add("fi", "lat", size, rep, d)

def median_run(tool, test, size, key):
    runs = [r for r in results.get((tool, test, size), []) if key in r]
    if not runs:
        return None, []
    runs.sort(key=lambda r: r[key])
    # odd count: the middle run; even count: the lower of the two middle runs
    return runs[(len(runs) - 1) // 2], runs

def fmt(v, nd=2):
    return "n/a" if v is None else f"{v:.{nd}f}"

def missing(tool):
    if tool in have and not have[tool]:
        return "not available"
    return "failed"

def xfer_missing_note():
    if not have["xfer"]:
        p("")
        p(f"xfer-perf: {xfer_note}.")

NOISY = 1.3
noisy_seen = False

def cell(tool, test, size, key, nd=2):
    """Median figure as text (marked * when its runs spread by more than 30 %) and as a number."""
    global noisy_seen
    r, runs = median_run(tool, test, size, key)
    if r is None:
        return missing(tool), None
    vals = [x[key] for x in runs]
    mark = ""
    if len(vals) > 1 and min(vals) > 0 and max(vals) / min(vals) > NOISY:
        mark = " *"
        noisy_seen = True
    return fmt(r[key], nd) + mark, r[key]

def noisy_note():
    global noisy_seen
    if noisy_seen:
        p("")
        p("\\* the runs behind this figure differ by more than 30 % (see the details table): "
          "the machine was busy, so treat it with care or run again.")
    noisy_seen = False

def ratio(a, b):
    return f"{a / b:.2f}x" if a is not None and b else "n/a"

def rep_ratios(tool, base, test, size, key):
    """xfer-style ratio within each repetition (the two ran back to back, in the same
    machine state), as "median (min-max)": robust when the machine's speed changes
    between repetitions, which a ratio of two medians is not."""
    a = {r["rep"]: r[key] for r in results.get((tool, test, size), []) if key in r}
    b = {r["rep"]: r[key] for r in results.get((base, test, size), []) if key in r}
    rs = sorted(a[k] / b[k] for k in a if k in b and b[k])
    if not rs:
        return "n/a"
    return f"{rs[(len(rs) - 1) // 2]:.2f}x ({rs[0]:.2f}-{rs[-1]:.2f})"

def size_name(n):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"

# The peers' medians, as JSON lines for bench/plot.py.
with open(peers_file, "w") as f:
    for tool, label in (("xfer", "xfer-perf, interleaved runs"), ("floor", "tcp-floor"), ("ucx", "UCX tcp"),
                        ("fi", "fi_pingpong tcp")):
        for test, sizes, key, out_key in (("lat", lat_sizes, "p50_us" if tool != "fi" else "avg_us", "p50_us"),
                                          ("bw", bw_sizes, "mib_s", "mib_s")):
            for s in sizes:
                r, _ = median_run(tool, test, s, key)
                if r is not None:
                    f.write(json.dumps({"label": label, "test": "tag_" + test, "size": s, out_key: r[key]}) + "\n")

o = []
p = o.append
p("# xfer loopback comparison")
p("")
p(f"- Date: {meta['date']}")
p(f"- Kernel: `{meta['kernel']}`")
p(f"- CPU: {meta['cpu']} ({meta['ncpu']} CPUs online)")
p(f"- Packages: ucx-utils {meta['ucx']}, libfabric-bin {meta['fi']}; {meta['rustc']}")
p(f"- Pinning: servers `taskset -c {meta['server_cpu']}`, clients `taskset -c {meta['client_cpu']}`; "
  "all traffic on 127.0.0.1 (UCX with `UCX_NET_DEVICES=lo`, fi_pingpong with `-d lo`)")
p(f"- Repetitions: every measurement ran {reps} times, interleaved across tools; each figure is the "
  "**median run** (the run with the median p50 for latency, median MiB/s for bandwidth). "
  f"Whole comparison took {meta['elapsed']} s.")
p(f"- Load average (1/5/15 min): {meta['load']}; other work on the machine shows up as spread between runs")
p(f"- Latency: {lat_iters} timed iterations per size after a warm-up (fi_pingpong has no warm-up: see notes)")
p("")
p("## Latency: half round trip, microseconds")
p("")
p("| size | floor p50 | xfer p50 | xfer/floor | per repetition | UCX | fi_pingpong |")
p("|---:|---:|---:|---:|---:|---:|---:|")
for s in lat_sizes:
    fl, flv = cell("floor", "lat", s, "p50_us")
    xf, xfv = cell("xfer", "lat", s, "p50_us")
    uc, _ = cell("ucx", "lat", s, "p50_us")
    fi, _ = cell("fi", "lat", s, "avg_us")
    per = rep_ratios("xfer", "floor", "lat", s, "p50_us")
    p(f"| {size_name(s)} | {fl} | {xf} | {ratio(xfv, flv)} | {per} | {uc} | {fi} |")
noisy_note()
xfer_missing_note()
p("")
p("Columns: xfer/floor = the two medians' ratio; per repetition = xfer's p50 over the floor's "
  "in the same repetition, median (min-max) over the repetitions: the machine's speed can change "
  "between repetitions, so the two medians may come from different states of it.")
p("")
p("Tools: floor = tcp-floor (raw non-blocking TCP, `TCP_NODELAY`, busy-polled `recv`), p50 of "
  "per-iteration samples; xfer = xfer-perf `tag_lat`, p50; UCX = `ucx_perftest tag_lat` 50th "
  "percentile (UCX takes it over the last 2048 iterations only); fi_pingpong = average over all "
  "iterations (it prints no percentile), with the connection setup it times taken out.")
p("")
p("### Latency details (median run; all runs' figures in the last column)")
p("")
p("| size | tool | avg | p50 | p99 | max | per run |")
p("|---:|---|---:|---:|---:|---:|---|")
for s in lat_sizes:
    for tool, label, key in (("floor", "floor", "p50_us"), ("xfer", "xfer-perf", "p50_us"),
                             ("ucx", "UCX", "p50_us"), ("fi", "fi_pingpong", "avg_us")):
        r, runs = median_run(tool, "lat", s, key)
        if r is None:
            p(f"| {size_name(s)} | {label} | {missing(tool)} | | | | |")
            continue
        per = ", ".join(fmt(x[key]) for x in sorted(runs, key=lambda x: x["rep"]))
        if tool == "fi":
            extra = "; raw " + ", ".join(fmt(x["raw_us"]) for x in sorted(runs, key=lambda x: x["rep"]))
            setup = [x["setup_ms"] for x in runs if "setup_ms" in x]
            if setup:
                extra += f"; setup {min(setup):.0f}-{max(setup):.0f} ms"
            p(f"| {size_name(s)} | {label} | {fmt(r['avg_us'])} | | | | avg {per}{extra} |")
        elif tool == "ucx":
            p(f"| {size_name(s)} | {label} | {fmt(r['avg_us'])} | {fmt(r['p50_us'])} | | | p50 {per} |")
        else:
            p(f"| {size_name(s)} | {label} | {fmt(r.get('avg_us'))} | {fmt(r.get('p50_us'))} | "
              f"{fmt(r.get('p99_us'))} | {fmt(r.get('max_us'))} | p50 {per} |")
p("")
p("## Bandwidth: MiB/s (1 MiB = 2^20 bytes)")
p("")
p("| size | floor MiB/s | xfer MiB/s | UCX MiB/s | xfer/UCX |")
p("|---:|---:|---:|---:|---:|")
for s in bw_sizes:
    fl, _ = cell("floor", "bw", s, "mib_s", 1)
    xf, xfv = cell("xfer", "bw", s, "mib_s", 1)
    uc, ucv = cell("ucx", "bw", s, "mib_s", 1)
    p(f"| {size_name(s)} | {fl} | {xf} | {uc} | {ratio(xfv, ucv)} |")
noisy_note()
xfer_missing_note()
p("")
p("Columns: floor = tcp-floor `bw` (one `send` per message, a 1-byte ack every 64 messages, two windows in flight); "
  "xfer = xfer-perf `tag_bw`; UCX = `ucx_perftest tag_bw` overall bandwidth (UCX prints MB/s "
  "meaning 2^20 bytes/s, so it is used as is).")
p("")
p("### Bandwidth details")
p("")
p("| size | tool | iters | MiB/s | msg/s | MiB/s per run |")
p("|---:|---|---:|---:|---:|---|")
for s in bw_sizes:
    for tool, label in (("floor", "floor"), ("xfer", "xfer-perf"), ("ucx", "UCX")):
        r, runs = median_run(tool, "bw", s, "mib_s")
        if r is None:
            p(f"| {size_name(s)} | {label} | {missing(tool)} | | | |")
            continue
        per = ", ".join(fmt(x["mib_s"], 1) for x in sorted(runs, key=lambda x: x["rep"]))
        p(f"| {size_name(s)} | {label} | {int(r.get('iters', 0))} | {fmt(r['mib_s'], 1)} | "
          f"{fmt(r.get('msg_rate'), 0)} | {per} |")
p("")
p(f"## Message rate: {size_name(rate_size)} messages, at most {rate_window} in flight")
p("")
p("| tool | msg/s (median run) | per run | xfer/tool |")
p("|---|---:|---|---:|")
_, xrate = cell("xfer", "bw", rate_size, "msg_rate", 0)
for tool, label in (("floor", "floor"), ("xfer", "xfer-perf"), ("ucx", "UCX")):
    text, v = cell(tool, "bw", rate_size, "msg_rate", 0)
    _, runs = median_run(tool, "bw", rate_size, "msg_rate")
    per = ", ".join(fmt(x["msg_rate"], 0) for x in sorted(runs, key=lambda x: x["rep"]))
    p(f"| {label} | {text} | {per} | {ratio(xrate, v) if tool != 'xfer' else ''} |")
noisy_note()
p("")
p(f"Columns: floor = tcp-floor `bw` with a 1-byte ack every {rate_window} messages (two windows in flight); xfer = xfer-perf "
  f"`tag_rate` (at most {rate_window} sends in flight, {rate_window} receives posted, the clock stopped by the receiver's word "
  f"that the last message arrived); UCX = `ucx_perftest tag_bw -O {rate_window}` overall message rate.")
p("")
p("## Notes")
p("")
p("- UCX: `ucx_perftest` prints latency already halved for ping-pong tests and bandwidth in "
  "MB/s where MB = 2^20 bytes (it divides bytes/s by 1024*1024); the `overall` columns of its "
  "`Final:` line are used.")
p("- fi_pingpong: `usec/xfer` = elapsed / (2 x iterations), i.e. half a round trip already; "
  "its `MB/sec` counts both directions in 10^6 bytes and is not used. It has no warm-up and its "
  "timed loop includes the lazy connection setup of the rdm endpoint (tens of ms), so each size "
  "also runs once with `-I 1` and that run's elapsed time is subtracted: "
  "(elapsed(N) - elapsed(1)) / (2 (N - 1)). The raw figures are in the details table.")
p("- All three peers busy-poll: tcp-floor spins on `recv(MSG_DONTWAIT)`, ucx_perftest on "
  "`ucp_worker_progress`, fi_pingpong on `fi_cq_read`.")
if failures:
    p("")
    p("## Failed runs")
    p("")
    # identical output from several runs is shown once
    groups = {}
    for tool, test, sizes, rep, tail in failures:
        groups.setdefault((tool, tuple(tail)), []).append(f"{test} {sizes} run {rep}")
    for (tool, tail), runs in groups.items():
        p(f"- {tool}: {'; '.join(runs)}")
        p("")
        p("  ```")
        for l in tail or ("(no output)",):
            p("  " + l)
        p("  ```")
p("")
p("## Commands")
p("")
p("Each pair ran once per repetition and size; PORT was a free port on 127.0.0.1 "
  "(tcp-floor: `--port 0`, the port it prints), NAME the address xfer-perf's server printed.")
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
PY
if [[ $DO_PLOT -eq 1 && -s $SWEEP ]]; then
    plot_note="TCP loopback, server on CPU $SERVER_CPU, client on CPU $CLIENT_CPU; $CPU_MODEL, $(nproc) CPUs, \
load average $LOAD_START at start, $LOAD_END at end; $(date -u +%F). Line: one xfer-perf sweep after the \
interleaved runs; markers: medians of $REPS interleaved runs (fi_pingpong: average, setup taken out). bench/compare.sh"
    mkdir -p "$(dirname "$PLOT")"
    plot_args=(--out "$PLOT" --note "$plot_note")
    [[ $INSTALL -eq 1 ]] || plot_args+=(--no-install)
    if python3 "$ROOT/bench/plot.py" "${plot_args[@]}" "$SWEEP" "$PEERS" >&2; then
        {
            echo
            echo "## Plots"
            echo
            echo "After the runs above, xfer-perf swept 1 B to 4 MiB alone (\`xfer-perf --json --test tag_lat,tag_bw\`,"
            echo "default iterations, pinned as above); drawn as a line, with the medians above as markers:"
            echo "\`${PLOT#"$ROOT"/}-latency.png\`, \`${PLOT#"$ROOT"/}-bandwidth.png\`."
        } >>"$OUT"
    else
        log "no plots (bench/plot.py failed)"
    fi
fi
cat "$OUT"
log "report written to $OUT"

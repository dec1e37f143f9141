#!/usr/bin/env bash
# mpi-compare.sh - Open MPI's NetPIPE (NPopenmpi, 2 ranks on loopback) over xfer against
# Open MPI's other transports, in one run:
#   xfer      --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include xfer (libxfer_fi.so,
#             release, over xfer's TCP provider: -x XFER_PROVIDER=tcp)
#   ofi-tcp   --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include tcp -x FI_PROVIDER=tcp
#             (libfabric's own tcp provider)
#   ucx       --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any -x UCX_TLS=tcp,self
#   ob1-tcp   --mca pml ob1 --mca btl tcp,self
# With --shm, the same over shared memory (2 ranks on one node):
#   xfer-shm  as xfer, over the plug-in's default domain (shm+tcp: shared memory between
#             ranks on one node)
#   ofi-shm   --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include shm -x FI_PROVIDER=shm
#             (libfabric's own shm provider)
#   ucx       --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any (UCX's defaults:
#             its shared-memory transports)
#   ob1-sm    --mca pml ob1 --mca btl vader,self (Open MPI 4.1's shared-memory BTL)
# Each repetition runs the four in turn (the order rotates each repetition); the table
# gives the median of the repetitions: NetPIPE's latency (half a round trip, usec) at 1 B
# and 64 B and its bandwidth (Mbit/s) at 64 KiB and 1 MiB, then xfer's ratio to the best
# of the other three (latency: xfer / lowest; bandwidth: xfer / highest). NetPIPE runs
# `-l 1 -u 1048576 -p 0` and picks its own repetition counts. Ranks are bound to cores
# (Open MPI's default for 2 ranks). The load average is printed before and after: the
# machine is shared, and these are ratios from one run, not absolute figures.
# Not part of `make test`.
#
# usage: bench/mpi-compare.sh [--reps N] [--keep] [--shm] [--base LIB]
#   --reps N   repetitions (default 3)
#   --keep     keep NetPIPE's raw output (the directory is printed)
#   --shm      the shared-memory transports instead of the TCP ones
#   --base LIB also another build of the plug-in (a libxfer_fi.so, say main's) as a fifth
#              transport, xfer-base, in the same rotation, and xfer's ratio to it
# Needs openmpi-bin, netpipe-openmpi, libfabric (tcp provider), UCX (scripts/setup.sh and
# tests/vm/setup.sh install them).
set -euo pipefail

REPS=3
KEEP=0
SHM=0
BASE=
while [[ $# -gt 0 ]]; do
    case "$1" in
    --reps)
        [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || { echo "mpi-compare: --reps N" >&2; exit 2; }
        REPS=$2
        shift 2
        ;;
    --keep) KEEP=1; shift ;;
    --shm) SHM=1; shift ;;
    --base)
        [[ $# -ge 2 && -f "$2" ]] || { echo "mpi-compare: --base LIB (a libxfer_fi.so)" >&2; exit 2; }
        BASE=$(realpath "$2")
        shift 2
        ;;
    -h | --help) sed -n '2,37p' "$0"; exit 0 ;;
    *) echo "mpi-compare: unknown argument $1" >&2; exit 2 ;;
    esac
done
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
for tool in mpirun NPopenmpi; do
    command -v "$tool" >/dev/null || { echo "mpi-compare: $tool missing (scripts/setup.sh)" >&2; exit 2; }
done

echo "mpi-compare: building libxfer_fi.so (release)" >&2
cargo build --release --locked -q -p xfer-ofi
prov=$(mktemp -d /tmp/mpi-compare-prov.XXXXXX)
raw=$(mktemp -d /tmp/mpi-compare.XXXXXX)
base_prov=$(mktemp -d /tmp/mpi-compare-base.XXXXXX)
cleanup() {
    rm -rf "$prov" "$base_prov"
    [ "$KEEP" = 1 ] && echo "mpi-compare: raw output kept in $raw" >&2 || rm -rf "$raw"
}
trap cleanup EXIT
cp "${CARGO_TARGET_DIR:-target}/release/libxfer_fi.so" "$prov/" # a directory holding only our provider

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common=(-np 2 --bind-to core)
declare -A flags=(
    [xfer]="--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include xfer -x FI_PROVIDER=xfer -x FI_PROVIDER_PATH=$prov -x XFER_TCP_ADDR=127.0.0.1 -x XFER_PROVIDER=tcp"
    [ofi-tcp]="--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include tcp -x FI_PROVIDER=tcp"
    [ucx]="--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any -x UCX_TLS=tcp,self"
    [ob1-tcp]="--mca pml ob1 --mca btl tcp,self"
)
names=(xfer ofi-tcp ucx ob1-tcp)
if [ "$SHM" = 1 ]; then
    flags=(
        [xfer-shm]="--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include xfer -x FI_PROVIDER=xfer -x FI_PROVIDER_PATH=$prov -x XFER_TCP_ADDR=127.0.0.1"
        [ofi-shm]="--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include shm -x FI_PROVIDER=shm"
        [ucx]="--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any"
        [ob1-sm]="--mca pml ob1 --mca btl vader,self"
    )
    names=(xfer-shm ofi-shm ucx ob1-sm)
fi
if [ -n "$BASE" ]; then
    cp "$BASE" "$base_prov/libxfer_fi.so"
    flags[xfer-base]=${flags[${names[0]}]//$prov/$base_prov}
    names+=(xfer-base)
fi
SIZES=(1 64 65536 1048576)

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for ((r = 0; r < REPS; r++)); do
    for ((k = 0; k < ${#names[@]}; k++)); do
        n=${names[$(((k + r) % ${#names[@]}))]}
        echo "mpi-compare: rep $((r + 1))/$REPS: $n (load $(cut -d' ' -f1 /proc/loadavg))" >&2
        # shellcheck disable=SC2086  # the flags are word lists on purpose
        if ! (cd "$raw" && timeout 600 mpirun "${common[@]}" ${flags[$n]} NPopenmpi -l 1 -u 1048576 -p 0 \
            >"$raw/$n.$r.out" 2>"$raw/$n.$r.err"); then
            echo "mpi-compare: $n failed (rep $((r + 1))):" >&2
            tail -5 "$raw/$n.$r.err" >&2
        fi
    done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# value NAME SIZE COLUMN: the median over the repetitions of NetPIPE's usec (COLUMN=usec)
# or Mbps (COLUMN=mbps) at SIZE bytes; "-" when no run measured it.
value() {
    local n=$1 size=$2 col=$3
    for ((r = 0; r < REPS; r++)); do
        # "  1:       1 bytes  24398 times -->      1.07 Mbps in       7.15 usec"
        awk -v s="$size" -v c="$col" '$3 == "bytes" && $2 == s { print (c == "usec" ? $10 : $7) }' \
            "$raw/$n.$r.err" 2>/dev/null
    done | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else print v[int((NR + 1) / 2)] }'
}

declare -A val
for n in "${names[@]}"; do
    for s in "${SIZES[@]}"; do
        col=mbps
        [ "$s" -le 64 ] && col=usec
        val[$n.$s]=$(value "$n" "$s" "$col")
    done
done

label() {
    case $1 in
    1) echo "latency 1 B (usec)" ;; 64) echo "latency 64 B (usec)" ;;
    65536) echo "bandwidth 64 KiB (Mbit/s)" ;; 1048576) echo "bandwidth 1 MiB (Mbit/s)" ;;
    esac
}

echo "NetPIPE (\`NPopenmpi -l 1 -u 1048576 -p 0\`), 2 ranks on one host, median of $REPS run(s);"
echo "$(nproc) CPUs, load average $load_before before, $load_after after; $(date -u '+%F %H:%M') UTC,"
echo "commit $(git describe --always --dirty 2>/dev/null || echo unknown)."
echo
head="| | ${names[0]} | ${names[1]} | ${names[2]} | ${names[3]} |"
[ -n "$BASE" ] && head+=" xfer-base ($BASE) |"
head+=" ${names[0]} / best of the others |"
[ -n "$BASE" ] && head+=" ${names[0]} / xfer-base |"
echo "$head"
echo "$head" | awk -F'|' '{ s = "|"; for (i = 2; i < NF; i++) s = s "---|"; print s }'
for s in "${SIZES[@]}"; do
    line="| $(label "$s") |"
    for n in "${names[@]}"; do line+=" ${val[$n.$s]} |"; done
    lat=$([ "$s" -le 64 ] && echo 1 || echo 0)
    ratio=$(awk -v x="${val[${names[0]}.$s]}" -v a="${val[${names[1]}.$s]}" -v b="${val[${names[2]}.$s]}" -v c="${val[${names[3]}.$s]}" \
        -v lat="$([ "$s" -le 64 ] && echo 1 || echo 0)" 'BEGIN {
        best = ""; split(a " " b " " c, v, " ")
        for (i = 1; i <= 3; i++) if (v[i] != "-" && (best == "" || (lat ? v[i] + 0 < best : v[i] + 0 > best))) best = v[i] + 0
        if (x == "-" || best == "" || best == 0) print "-"; else printf "%.2f (%s)\n", x / best, lat ? "lower is better" : "higher is better"
    }')
    line+=" $ratio |"
    if [ -n "$BASE" ]; then
        line+=" $(awk -v x="${val[${names[0]}.$s]}" -v b="${val[xfer-base.$s]}" -v lat="$lat" 'BEGIN {
            if (x == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.2f (%s)\n", x / b, lat ? "lower is better" : "higher is better"
        }') |"
    fi
    echo "$line"
done

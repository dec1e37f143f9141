#!/usr/bin/env bash
# Host: build, without running, every binary the Soft-RoCE guest runs, and print one
# KEY=PATH line per binary on stdout, for tests/vm/all.sh (which takes them as
# arguments) and bench/verbs-compare.sh:
#   VERBS_<NAME>=... each xfer-verbs integration test, providers/verbs/tests/<name>.rs
#                    (debug; today VERBS_RC)
#   CONFORMANCE=...  root package tests/conformance.rs (release: TCG is ~10x slower)
#   PEER_DEATH=...   root package tests/peer_death.rs (release)
#   SCALE=...        root package tests/scale.rs (release)
#   TCP_FAULTS=...   root package tests/tcp_faults.rs (release): TCP between two network
#                    namespaces under netem, link down, SIGKILL and restart
#   AIO=...          root package tests/aio.rs (release): the async layer (xfer::aio, tokio)
#   FLOW_CONTROL=... root package tests/flow_control.rs (release): a fast sender against a
#                    receiver that posts nothing (verbs credit: bounded memory, no RNR)
#   STALL=...        root package tests/tcp_stall.rs (release): the progress timeout against a
#                    stopped peer process (run over verbs by all.sh's rdm step)
#   MIXED=...        root package tests/mixed.rs (release): one endpoint of a pair provider
#                    serving a peer over shared memory and one over the network (all.sh's rdm
#                    step runs it over shm+verbs)
#   TEARDOWN=...     root package tests/teardown.rs (release): every drop order with
#                    thousands of operations in flight
#   RPC=...          xfer-rpc's tests/rpc.rs (release; examples/rpc): tarpc over xfer, the
#                    xfer-rpc server and client processes (the test runs the xfer-rpc binary
#                    cargo built beside it)
#   VERBS_FAULTS=... root package tests/verbs_faults.rs (release): verbs between two rxe
#                    devices on a veth pair under netem loss and link down
#   XFER_PERF=...    xfer-perf (release)
#   XFER_INFO=...    xfer-info (release)
#   C_SUITE=...      a directory holding libxfer.so (xfer-capi, release, with the verbs
#                    provider) and, linked against it with rpath $ORIGIN, the C suite
#                    tests/c/test_capi.c and the examples examples/c/pingpong.c, rma.c
#   OFI=...          a directory holding libxfer_fi.so (xfer-ofi, release, with the verbs
#                    provider), the FI_PROVIDER_PATH for libfabric's fi_pingpong, and
#                    ofi/tests/c/fi_suite.c compiled against libfabric as `fi_suite`
#                    (libfabric loads only files whose names end in fi.so from there)
#   MPI=...          a directory holding libxfer_fi.so (release), ofi/tests/mpi.rs's test
#                    binary as `mpi-test` and ofi/tests/c/mpi_check.c and mpi_onesided.c
#                    compiled with mpicc as `mpi_check` and `mpi_onesided` (the test's
#                    XFER_OFI_TEST_DIR)
# Build output goes to stderr. Honors CARGO_TARGET_DIR (the paths printed are cargo's
# own). Fails, naming the build, if any build fails.
#
# usage: tests/vm/build-verbs.sh [--only KEY[,KEY...]] [CARGO_ARGS...]
#   --only       build just these (e.g. --only XFER_PERF for bench/verbs-compare.sh);
#                VERBS means every xfer-verbs integration test
#   CARGO_ARGS   passed to every cargo invocation (e.g. --locked)
# Environment:
#   XFER_VM_FEATURES  cargo features for the root package's builds. Unset: `verbs` if
#                     the root package has a feature of that name (the verbs provider
#                     compiled in), else none. Set (even empty): exactly these.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

all_keys=(VERBS CONFORMANCE PEER_DEATH SCALE TCP_FAULTS AIO FLOW_CONTROL STALL MIXED TEARDOWN RPC VERBS_FAULTS XFER_PERF XFER_INFO C_SUITE OFI MPI)
want=("${all_keys[@]}")
if [ "${1:-}" = --only ]; then
    [ $# -ge 2 ] || { echo "build-verbs: --only needs KEY[,KEY...] (${all_keys[*]})" >&2; exit 2; }
    IFS=, read -r -a want <<<"$2"
    shift 2
    for k in "${want[@]}"; do
        case " ${all_keys[*]} " in
        *" $k "*) ;;
        *) echo "build-verbs: unknown key $k (known: ${all_keys[*]})" >&2; exit 2 ;;
        esac
    done
fi
wants() { case " ${want[*]} " in *" $1 "*) return 0 ;; esac; return 1; }

PY=$(command -v python3 || true)
[ -n "$PY" ] || { echo "build-verbs: python3 is required (to read cargo's JSON)" >&2; exit 2; }

# Features of the root package (xfer): the verbs provider may sit behind a `verbs` feature.
if [ -n "${XFER_VM_FEATURES+set}" ]; then
    features=$XFER_VM_FEATURES
else
    features=$(cargo metadata --no-deps --format-version 1 2>/dev/null | "$PY" -c '
import json, sys
try:
    meta = json.load(sys.stdin)
except ValueError:
    sys.exit(0)
for p in meta.get("packages", []):
    if p["name"] == "xfer" and "verbs" in p.get("features", {}):
        print("verbs")
' || true)
fi
feature_args=()
[ -n "$features" ] && feature_args=(--features "$features")
echo "build-verbs: root package features: ${features:-(none)}" >&2

# Filters cargo's --message-format=json on stdin: compiler
# messages go to stderr as cargo would print them, and "kind name executable source" for
# each built executable ("cdylib name file.so source" for each shared library) is
# appended to the file $1.
filter_cargo_json() {
    "$PY" -c '
import json, sys
with open(sys.argv[1], "a") as arts:
    for line in sys.stdin:
        try:
            m = json.loads(line)
        except ValueError:
            sys.stderr.write(line)
            continue
        reason = m.get("reason")
        if reason == "compiler-message":
            sys.stderr.write(m["message"].get("rendered") or "")
        elif reason == "compiler-artifact" and m.get("executable"):
            t = m["target"]
            arts.write("%s %s %s %s\n" % (t["kind"][0], t["name"], m["executable"], t["src_path"]))
        elif reason == "compiler-artifact" and "cdylib" in m["target"]["kind"]:
            t = m["target"]
            for f in m.get("filenames", []):
                if f.endswith(".so"):
                    arts.write("cdylib %s %s %s\n" % (t["name"], f, t["src_path"]))
' "$1"
}

arts=$(mktemp /tmp/build-verbs.XXXXXX)
trap 'rm -f "$arts"' EXIT
# cargo_build WHAT CARGO_ARGS...: cargo's progress and errors on stderr, artifacts to $arts.
cargo_build() {
    local what=$1
    shift
    echo "build-verbs: cargo $*" >&2
    if ! cargo "$@" --message-format=json | filter_cargo_json "$arts"; then
        echo "build-verbs: FAILED to build $what (cargo $*)" >&2
        exit 1
    fi
}

if wants VERBS; then
    cargo_build "the xfer-verbs integration tests" test -p xfer-verbs --test '*' --no-run "$@"
fi
tests=()
wants CONFORMANCE && tests+=(--test conformance)
wants PEER_DEATH && tests+=(--test peer_death)
wants SCALE && tests+=(--test scale)
wants TCP_FAULTS && tests+=(--test tcp_faults)
wants AIO && tests+=(--test aio)
wants FLOW_CONTROL && tests+=(--test flow_control)
wants STALL && tests+=(--test tcp_stall)
wants MIXED && tests+=(--test mixed)
wants TEARDOWN && tests+=(--test teardown)
wants VERBS_FAULTS && tests+=(--test verbs_faults)
if [ ${#tests[@]} -gt 0 ]; then
    cargo_build "the root package's tests (${tests[*]})" \
        test --release -p xfer "${tests[@]}" --no-run "${feature_args[@]}" "$@"
fi
if wants RPC; then
    # xfer-rpc depends on xfer with its default features (the verbs provider included).
    cargo_build "xfer-rpc's tests (--test rpc)" test --release -p xfer-rpc --test rpc --no-run "$@"
fi
bins=()
wants XFER_PERF && bins+=(--bin xfer-perf)
wants XFER_INFO && bins+=(--bin xfer-info)
if [ ${#bins[@]} -gt 0 ]; then
    cargo_build "${bins[*]}" build --release -p xfer "${bins[@]}" "${feature_args[@]}" "$@"
fi
if wants C_SUITE; then
    # libxfer with its default features (the verbs provider included).
    cargo_build "libxfer (xfer-capi)" build --release -p xfer-capi --lib "$@"
fi
if wants OFI; then
    # libxfer_fi with its default features (the verbs provider included).
    cargo_build "libxfer_fi (xfer-ofi)" build --release -p xfer-ofi --lib "$@"
fi
if wants MPI; then
    cargo_build "ofi/tests/mpi.rs (xfer-ofi)" test --release -p xfer-ofi --test mpi --no-run "$@"
fi

# build_mpi: a directory with libxfer_fi.so, the mpi test binary (as mpi-test) and
# mpi_check and mpi_onesided compiled with mpicc; prints it.
build_mpi() {
    local so exe dir
    so=$(awk '$1 == "cdylib" && $2 == "xfer_fi" { p = $3 } END { print p }' "$arts")
    exe=$(awk '$1 == "test" && $2 == "mpi" && $4 ~ "/ofi/tests/mpi.rs$" { p = $3 } END { print p }' "$arts")
    if [ -z "$so" ] || [ ! -f "$so" ] || [ -z "$exe" ] || [ ! -x "$exe" ]; then
        echo "build-verbs: no libxfer_fi.so or ofi/tests/mpi.rs binary in cargo's output" >&2
        exit 1
    fi
    dir=$(dirname "$exe")/../ofi-mpi
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    cp -f "$so" "$dir/libxfer_fi.so"
    cp -f "$exe" "$dir/mpi-test"
    local prog
    for prog in mpi_check mpi_onesided; do
        echo "build-verbs: mpicc ofi/tests/c/$prog.c -> $dir/$prog" >&2
        if ! mpicc -Wall -Wextra -Werror -O1 -g "ofi/tests/c/$prog.c" -o "$dir/$prog" >&2; then
            echo "build-verbs: FAILED to compile ofi/tests/c/$prog.c (libopenmpi-dev)" >&2
            exit 1
        fi
    done
    echo "$dir"
}

# build_ofi: copies libxfer_fi.so into a directory (libfabric loads every *fi.so of an
# FI_PROVIDER_PATH directory, nothing else), compiles the libfabric C suite there and
# prints it.
build_ofi() {
    local so dir
    so=$(awk '$1 == "cdylib" && $2 == "xfer_fi" { p = $3 } END { print p }' "$arts")
    if [ -z "$so" ] || [ ! -f "$so" ]; then
        echo "build-verbs: no libxfer_fi.so in cargo's output" >&2
        exit 1
    fi
    dir=$(dirname "$so")/ofi-provider
    mkdir -p "$dir"
    cp -f "$so" "$dir/libxfer_fi.so"
    echo "build-verbs: ${CC:-cc} ofi/tests/c/fi_suite.c -> $dir/fi_suite" >&2
    if ! "${CC:-cc}" -Wall -Wextra -Werror -O1 -g -pthread ofi/tests/c/fi_suite.c -o "$dir/fi_suite" -lfabric >&2; then
        echo "build-verbs: FAILED to compile ofi/tests/c/fi_suite.c (libfabric-dev)" >&2
        exit 1
    fi
    echo "$dir"
}

# build_c_suite: copies libxfer.so into DIR (next to its libxfer.so) and compiles the C
# suite and the C examples there against it, finding it at run time through $ORIGIN.
# Prints DIR.
build_c_suite() {
    local so dir src out
    so=$(awk '$1 == "cdylib" && $2 == "xfer" { p = $3 } END { print p }' "$arts")
    if [ -z "$so" ] || [ ! -f "$so" ]; then
        echo "build-verbs: no libxfer.so in cargo's output" >&2
        exit 1
    fi
    dir=$(dirname "$so")/c-suite
    mkdir -p "$dir"
    cp -f "$so" "$dir/libxfer.so"
    for src in tests/c/test_capi.c examples/c/pingpong.c examples/c/rma.c; do
        out=$(basename "$src" .c)
        echo "build-verbs: ${CC:-cc} $src -> $dir/$out" >&2
        if ! "${CC:-cc}" -std=c11 -Wall -Wextra -Werror -pthread -g -O1 -Iinclude "$src" \
            -L"$dir" -lxfer -Wl,-rpath,'$ORIGIN' -o "$dir/$out" >&2; then
            echo "build-verbs: FAILED to compile $src" >&2
            exit 1
        fi
    done
    echo "$dir"
}

# key -> "kind name" of its artifact
declare -A target=([CONFORMANCE]="test conformance" [PEER_DEATH]="test peer_death" [SCALE]="test scale"
    [TCP_FAULTS]="test tcp_faults" [AIO]="test aio" [FLOW_CONTROL]="test flow_control" [STALL]="test tcp_stall" [MIXED]="test mixed" [TEARDOWN]="test teardown" [RPC]="test rpc" [VERBS_FAULTS]="test verbs_faults" [XFER_PERF]="bin xfer-perf" [XFER_INFO]="bin xfer-info")
out=()
add() { # KEY PATH
    if [ -z "$2" ] || [ ! -x "$2" ]; then
        echo "build-verbs: no executable for $1 in cargo's output" >&2
        exit 1
    fi
    case $2 in
    *[[:space:]]*)
        echo "build-verbs: $1 path contains whitespace, which all.sh's arguments cannot carry: $2" >&2
        exit 1
        ;;
    esac
    out+=("$1=$2")
}
for k in "${want[@]}"; do
    if [ "$k" = OFI ]; then
        dir=$(build_ofi)
        case $dir in
        *[[:space:]]*)
            echo "build-verbs: OFI path contains whitespace: $dir" >&2
            exit 1
            ;;
        esac
        out+=("OFI=$dir")
        continue
    fi
    if [ "$k" = MPI ]; then
        dir=$(build_mpi)
        case $dir in
        *[[:space:]]*)
            echo "build-verbs: MPI path contains whitespace: $dir" >&2
            exit 1
            ;;
        esac
        out+=("MPI=$dir")
        continue
    fi
    if [ "$k" = C_SUITE ]; then
        dir=$(build_c_suite)
        case $dir in
        *[[:space:]]*)
            echo "build-verbs: C_SUITE path contains whitespace: $dir" >&2
            exit 1
            ;;
        esac
        out+=("C_SUITE=$dir")
        continue
    fi
    if [ "$k" = VERBS ]; then
        # Integration tests of xfer-verbs: test targets whose source is under providers/verbs/tests.
        found=0
        while read -r name path; do
            add "VERBS_$(tr '[:lower:]-' '[:upper:]_' <<<"$name")" "$path"
            found=1
        done < <(awk '$1 == "test" && $4 ~ "/providers/verbs/tests/" { print $2, $3 }' "$arts" | sort -u)
        [ "$found" = 1 ] || { echo "build-verbs: no xfer-verbs integration test in cargo's output" >&2; exit 1; }
        continue
    fi
    path=$(awk -v t="${target[$k]}" '$1 " " $2 == t { p = $3 } END { print p }' "$arts")
    add "$k" "$path"
done
printf '%s\n' "${out[@]}"

#!/usr/bin/env bash
# Fuzzes xfer's decoders of peer bytes (fuzz/, docs/FUZZING.md): builds every
# cargo-fuzz target once, replays the committed seed corpus and regression
# inputs of each (fuzz/corpus/<target>, fuzz/artifacts/<target>), then fuzzes
# each for a bounded time. Exits nonzero on any crash; a new crashing input
# is saved to fuzz/artifacts/<target>/ (commit it with the fix).
#
#   scripts/fuzz.sh                  every target, FUZZ_SECONDS (10) each
#   scripts/fuzz.sh tcp_stream rkey  only these
#   FUZZ_SECONDS=600 scripts/fuzz.sh tcp_stream
#   FUZZ_SECONDS=0 scripts/fuzz.sh   replay the corpus and regressions only
#
# Environment: FUZZ_SECONDS (per target), FUZZ_SANITIZER (address, or none
# for speed), FUZZ_TARGET_DIR (default $CARGO_TARGET_DIR/fuzz when that
# is set, else fuzz/target), FUZZ_ARGS (extra libFuzzer flags),
# FUZZ_LIBFUZZER (system: Debian's prebuilt libFuzzer, the default;
# vendored: the copy libfuzzer-sys compiles, twice the build time).
#
# Installs what it needs when missing (Debian 12, as root): cargo-fuzz from
# crates.io; Debian's libfuzzer-14-dev (else g++, for the vendored copy);
# for the verbs targets, as for the workspace (scripts/setup.sh), the
# rdma-core headers, libclang and pkg-config.
#
# cargo-fuzz passes nightly-only flags (-Zsanitizer); RUSTC_BOOTSTRAP=1 lets
# the stable toolchain take them, for this script's cargo calls only.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${FUZZ_SECONDS:-10}
sanitizer=${FUZZ_SANITIZER:-address}
# Apart from the workspace's own builds: other flags, another lock file.
target_dir=${FUZZ_TARGET_DIR:-${CARGO_TARGET_DIR:+$CARGO_TARGET_DIR/fuzz}}
target_dir=${target_dir:-$PWD/fuzz/target}
read -r -a extra <<<"${FUZZ_ARGS:-}"
libfuzzer=${FUZZ_LIBFUZZER:-system}

apt_install() {
    echo "fuzz: installing $*"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq "$@" >/dev/null
}

need=()
command -v cc >/dev/null || need+=(gcc)
command -v pkg-config >/dev/null || need+=(pkg-config)
for pkg in libibverbs-dev librdmacm-dev libclang-dev; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
system_lib=/usr/lib/llvm-14/lib/libFuzzer.a
if [[ $libfuzzer == system && -z ${CUSTOM_LIBFUZZER_PATH:-} && ! -f $system_lib ]]; then
    need+=(libfuzzer-14-dev)
fi
((${#need[@]} == 0)) || apt_install "${need[@]}" || echo "fuzz: could not install ${need[*]}" >&2

if [[ $libfuzzer == system && -z ${CUSTOM_LIBFUZZER_PATH:-} ]]; then
    # libfuzzer-sys links this prebuilt libFuzzer instead of compiling its own.
    if [[ -f $system_lib ]]; then
        export CUSTOM_LIBFUZZER_PATH=$system_lib
    else
        echo "fuzz: no $system_lib; building libFuzzer from source"
        libfuzzer=vendored
    fi
fi
if [[ $libfuzzer == vendored ]]; then
    unset CUSTOM_LIBFUZZER_PATH
    command -v c++ >/dev/null || apt_install g++
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    # A debug build: it only runs cargo and the fuzzer, and builds in 2/3 the time.
    echo "fuzz: installing cargo-fuzz"
    cargo install cargo-fuzz --locked --debug
fi

host=$(rustc -vV | sed -n 's/^host: //p')
mapfile -t all < <(cd fuzz && cargo fuzz list)
targets=("${@:-${all[@]}}")
for t in "${targets[@]}"; do
    [[ " ${all[*]} " == *" $t "* ]] || { echo "fuzz: no target $t (have: ${all[*]})" >&2; exit 2; }
done

start=$SECONDS
echo "fuzz: building ${#all[@]} targets (sanitizer: $sanitizer)"
RUSTC_BOOTSTRAP=1 cargo fuzz build --sanitizer "$sanitizer" --target "$host" --target-dir "$target_dir"
echo "fuzz: built in $((SECONDS - start)) s"

work=$(mktemp -d /tmp/xfer-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
failed=()
for t in "${targets[@]}"; do
    bin=$target_dir/$host/release/$t
    seeds=(fuzz/corpus/"$t")
    [[ -d fuzz/artifacts/$t ]] && seeds+=(fuzz/artifacts/"$t")
    mkdir -p fuzz/artifacts/"$t" "$work/$t"
    log=$work/$t.log
    # The committed inputs first: every one must run clean.
    if ! "$bin" -runs=0 -timeout=20 -artifact_prefix="$work/" "${extra[@]}" "${seeds[@]}" >"$log" 2>&1; then
        echo "fuzz: $t: a committed input fails" >&2
        tail -n 40 "$log" >&2
        failed+=("$t")
        continue
    fi
    replayed=$(find "${seeds[@]}" -type f | wc -l)
    if ((seconds == 0)); then
        echo "fuzz: $t: replayed $replayed inputs"
        continue
    fi
    # New inputs go to a scratch corpus; the committed one only seeds it.
    if "$bin" -max_total_time="$seconds" -timeout=20 -print_final_stats=1 \
        -artifact_prefix=fuzz/artifacts/"$t"/ "${extra[@]}" "$work/$t" "${seeds[@]}" >"$log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
        cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1)
        echo "fuzz: $t: replayed $replayed inputs, then ${runs:-?} runs in ${seconds} s, $cov"
    else
        echo "fuzz: $t: CRASH (input saved under fuzz/artifacts/$t/)" >&2
        tail -n 60 "$log" >&2
        failed+=("$t")
    fi
done
echo "fuzz: done in $((SECONDS - start)) s"
if ((${#failed[@]})); then
    echo "fuzz: failed: ${failed[*]}" >&2
    exit 1
fi

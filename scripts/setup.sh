#!/usr/bin/env bash
# Installs what building and testing xfer needs on a fresh Debian 12 machine,
# skipping whatever is already there. Idempotent; needs root for apt-get.
# Covers the host build and tests: compiler, make, pkg-config, binutils, valgrind
# (C suite), the rdma-core headers and libclang (rdma-sys), libfabric's headers and
# tools (ofi/), Open MPI and NetPIPE (ofi/tests/mpi.rs), then fetches crates.
# The Soft-RoCE guest's packages are tests/vm/setup.sh's job.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v cc >/dev/null || need_apt+=(gcc)
command -v make >/dev/null || need_apt+=(make)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
command -v nm >/dev/null || need_apt+=(binutils)
command -v valgrind >/dev/null || need_apt+=(valgrind)   # the C ABI suite runs under memcheck
# rdma-sys (the verbs provider) runs bindgen against the rdma-core headers;
# xfer-ofi (ofi/) runs it against libfabric's, and its tests run libfabric's
# own fi_info and fi_pingpong (libfabric-bin) over libxfer_fi.so.
# ofi/tests/mpi.rs runs Open MPI over libxfer_fi.so: mpirun (openmpi-bin), mpicc and
# mpi.h for its correctness program (libopenmpi-dev), NetPIPE (netpipe-openmpi).
for pkg in libibverbs-dev librdmacm-dev libclang-dev libfabric-dev libfabric-bin \
    openmpi-bin libopenmpi-dev netpipe-openmpi; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if ((${#need_apt[@]})); then
    echo "setup: installing ${need_apt[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need_apt[@]}"
fi

if ! command -v cargo >/dev/null; then
    echo "setup: no cargo on PATH; install Rust (rustup) first" >&2
    exit 1
fi

# A build and test run (`make test`) writes ~6.5 GB under target/ and
# fuzz/target/ (a margin on top: 10 GiB). Where the disk holding this tree has less free and those
# directories do not exist yet, they are made in memory (/dev/shm, tmpfs) and
# linked here, so a machine with a full disk still builds; said once, here.
need_mib=$(( ${XFER_BUILD_SPACE_GIB:-10} * 1024 ))
free_mib() { df -Pm "$1" 2>/dev/null | awk 'NR == 2 { print $4 }'; }
disk_free=$(free_mib .)
if [[ -z ${CARGO_TARGET_DIR:-} && ! -e target && ${disk_free:-0} -lt $need_mib ]]; then
    shm_free=$(free_mib /dev/shm)
    if [[ ${shm_free:-0} -ge $need_mib ]]; then
        mem=/dev/shm/xfer-build-$(id -u)-$(pwd -P | cksum | cut -d' ' -f1)
        mkdir -p "$mem/target" "$mem/fuzz-target"
        ln -s "$mem/target" target
        [[ -e fuzz/target ]] || ln -s "$mem/fuzz-target" fuzz/target
        echo "setup: ${disk_free} MiB free on the disk under $PWD, the build needs ~${need_mib};" \
            "target/ and fuzz/target/ are in memory under $mem"
    else
        echo "setup: warning: ${disk_free} MiB free on the disk under $PWD and ${shm_free:-0}" \
            "in /dev/shm; the build and tests need ~${need_mib} MiB" >&2
    fi
fi
cargo fetch --locked -q

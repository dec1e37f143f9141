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
cargo fetch --locked -q

#!/usr/bin/env bash
# Install what the Soft-RoCE guest (tests/vm/run-guest.sh), rdma-sys builds and the verbs
# comparison (bench/verbs-compare.sh: perftest, UCX's ucx_perftest, libfabric's fi_pingpong) need.
# Idempotent and non-interactive; skips apt-get entirely when everything is present.
# Debian 12, run as root. See /work/shared/TESTING.md (shared/TESTING.md) for the recipe.
set -euo pipefail

APT_PKGS=(
    qemu-system-x86 linux-image-amd64
    rdma-core ibverbs-providers ibverbs-utils libibverbs-dev librdmacm-dev rdmacm-utils
    perftest ucx-utils libfabric-bin busybox-static libclang-dev clang pkg-config
    iproute2 kmod util-linux
    openmpi-bin libopenmpi-dev netpipe-openmpi # step mpi: Open MPI over libxfer_fi.so
)

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${APT_PKGS[@]}"; do
    # dpkg -s exits 0 for removed-but-config-files packages too; check the status line.
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
        missing+=("$p")
    fi
done

if [ ${#missing[@]} -gt 0 ]; then
    echo "setup.sh: apt-get installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q
    $SUDO apt-get install -y -q --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
        "${missing[@]}" </dev/null
else
    echo "setup.sh: apt packages already present"
fi

# virtme-ng provides `vng`. Use the same python3 that is first on PATH (pyenv's CPython
# here, which is not "externally managed"; Debian's /usr/bin/python3 is, and there pip
# needs --break-system-packages).
PY=${PYTHON:-python3}
if "$PY" -c 'import virtme_ng' 2>/dev/null; then
    echo "setup.sh: virtme-ng already present"
else
    echo "setup.sh: pip installing virtme-ng"
    if ! "$PY" -m pip install -q virtme-ng </dev/null 2>/tmp/setup-pip.err; then
        if grep -q externally-managed-environment /tmp/setup-pip.err; then
            "$PY" -m pip install -q --break-system-packages virtme-ng </dev/null
        else
            cat /tmp/setup-pip.err >&2
            exit 1
        fi
    fi
    if command -v pyenv >/dev/null 2>&1; then pyenv rehash 2>/dev/null || true; fi
fi

# Sanity checks.
scripts_dir=$("$PY" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
if ! command -v vng >/dev/null 2>&1 && [ ! -x "$scripts_dir/vng" ]; then
    echo "setup.sh: vng not found after install" >&2
    exit 1
fi
if ! ls /boot/vmlinuz-*-amd64 >/dev/null 2>&1; then
    echo "setup.sh: no Debian kernel in /boot after install" >&2
    exit 1
fi
echo "setup.sh: ok (kernel: $(ls /boot/vmlinuz-*-amd64 | sort -V | tail -1))"

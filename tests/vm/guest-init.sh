#!/usr/bin/env bash
# Runs INSIDE the Soft-RoCE guest booted by tests/vm/run-guest.sh. Not for the host.
#
# Usage (by run-guest.sh only): guest-init.sh RESULTS_DIR
#   RESULTS_DIR is the --rwdir shared with the host. It holds guest.env (written by
#   run-guest.sh: the script, its arguments, cwd and PATH) and receives:
#     started    - written as soon as this script runs (the guest booted)
#     rxe.log    - output of the rxe set-up
#     dmesg.log  - the guest kernel log after the script ran
#     exit_code  - the guest script's exit status, or "setup-failed"
set -u

RESULTS=${1:?usage: guest-init.sh RESULTS_DIR}
if ! grep -q virtme /proc/cmdline; then
    echo "guest-init: not in a virtme-ng guest; use tests/vm/run-guest.sh" >&2
    exit 2
fi
# shellcheck disable=SC1091
source "$RESULTS/guest.env" || { echo "guest-init: cannot read $RESULTS/guest.env" >&2; exit 1; }

report() { # write the exit status atomically and flush it through 9p
    printf '%s\n' "$1" >"$RESULTS/exit_code.tmp" && mv -f "$RESULTS/exit_code.tmp" "$RESULTS/exit_code"
    sync
}

echo "booted $(uname -r) at $(cut -d' ' -f1 /proc/uptime)s" >"$RESULTS/started"

export PATH="$XFER_GUEST_PATH:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
export HOME=${HOME:-/root}

# --- Soft-RoCE set-up (shared/TESTING.md) -------------------------------------------
setup_rxe() {
    # (set -e does not apply inside `if ! ...`, so chain explicitly.)
    modprobe rdma_rxe &&
        ip link set lo up &&
        ip link add dummy0 type dummy &&
        ip addr add 10.11.0.1/24 dev dummy0 &&
        ip link set dummy0 up &&
        rdma link add rxe0 type rxe netdev dummy0 || return 1
    # Wait for the port to go ACTIVE and for the IPv4 GID to appear.

    for _ in $(seq 1 100); do
        if rdma link show rxe0/1 2>/dev/null | grep -q 'state ACTIVE' &&
            grep -qi '0000:0000:0000:0000:0000:ffff:0a0b:0001' \
                /sys/class/infiniband/rxe0/ports/1/gids/* 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    echo "guest-init: rxe0 port 1 did not become ACTIVE with GID ::ffff:10.11.0.1" >&2
    rdma link show >&2
    return 1
}

if ! (setup_rxe) >"$RESULTS/rxe.log" 2>&1; then
    echo "guest-init: Soft-RoCE set-up failed:" >&2
    cat "$RESULTS/rxe.log" >&2
    report setup-failed
    exit 1
fi

# GID index of ::ffff:10.11.0.1 (RoCE v2), found rather than assumed (expected: 1).
gid_index=
for f in /sys/class/infiniband/rxe0/ports/1/gids/*; do
    if grep -qi '0000:0000:0000:0000:0000:ffff:0a0b:0001' "$f" 2>/dev/null; then
        gid_index=${f##*/}
        break
    fi
done

export XFER_VERBS_DEVICE=rxe0
export XFER_VERBS_PORT=1
export XFER_RDMA_ADDR=10.11.0.1
export RXE_GID_INDEX=${gid_index:-1}
export XFER_VM_RESULTS="$RESULTS"
export XFER_IN_GUEST=1
ulimit -l unlimited 2>/dev/null || true

cd "$XFER_GUEST_CWD" 2>/dev/null || cd /

script=${XFER_GUEST_ARGV[0]}
if [ -x "$script" ]; then
    "${XFER_GUEST_ARGV[@]}"
else
    bash "${XFER_GUEST_ARGV[@]}"
fi
rc=$?
dmesg >"$RESULTS/dmesg.log" 2>&1 || true
if [ "$rc" != 0 ]; then
    echo "guest-init: script exited $rc; last guest kernel messages:" >&2
    tail -n 25 "$RESULTS/dmesg.log" >&2
fi
report "$rc"
exit "$rc"

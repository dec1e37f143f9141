#!/usr/bin/env bash
# Boot one Soft-RoCE guest (Debian kernel under QEMU/TCG via virtme-ng) and run
# SCRIPT [ARGS...] inside it, after tests/vm/guest-init.sh has set up rdma_rxe:
#   device rxe0 (port 1) on dummy0 10.11.0.1/24, RoCE v2 GID index $RXE_GID_INDEX (1).
# The guest sees the host's root file system read-only (writes land in a throw-away
# overlay), so host-built binaries run at the same paths.
#
# Env exported to SCRIPT: XFER_VERBS_DEVICE=rxe0 XFER_VERBS_PORT=1 XFER_RDMA_ADDR=10.11.0.1
#   RXE_GID_INDEX=1 XFER_VM_RESULTS=<dir shared read-write with the host> XFER_IN_GUEST=1
#
# Host-side knobs:
#   XFER_VM_TIMEOUT  overall seconds for boot + script (default 1500)
#   XFER_VM_RESULTS  results dir to use/keep (default: a temp dir, removed afterwards)
#   XFER_VM_KERNEL   kernel image (default: newest /boot/vmlinuz-*-amd64)
#   XFER_VM_MEMORY / XFER_VM_CPUS  (default 2G / 2)
#   XFER_VM_VERBOSE=1  show the guest kernel's boot log
#   XFER_VM_APPEND   extra kernel command line (default tsc=reliable; empty: none)
# Every other XFER_* variable, RUST_BACKTRACE and RUST_LOG are passed on to SCRIPT.
# Ctrl-C / TERM / HUP stop the guest too (exit 130 / 143 / 129).
#
# Exit status: SCRIPT's exit status, as the guest reported it in the results dir; or
#   120  Soft-RoCE set-up failed in the guest
#   121  the guest never started guest-init.sh (boot failure)
#   122  the guest booted but SCRIPT never reported (crash or hang)
#   124  the overall timeout expired before SCRIPT reported
#   2    usage / host-side problem (no kernel, no vng)
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if [ $# -lt 1 ]; then
    echo "usage: $0 SCRIPT [ARGS...]" >&2
    exit 2
fi

script=$1
shift
if [ ! -f "$script" ]; then
    # Allow a command on PATH (e.g. a binary) as well as a file.
    if resolved=$(command -v "$script" 2>/dev/null) && [ -f "$resolved" ]; then
        script=$resolved
    else
        echo "run-guest: no such script: $script" >&2
        exit 2
    fi
fi
script=$(readlink -f "$script")

# --- host prerequisites ---------------------------------------------------------------
vng=$(command -v vng 2>/dev/null || true)
if [ -z "$vng" ]; then
    cand="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))' 2>/dev/null)/vng"
    [ -x "$cand" ] && vng=$cand
fi
if [ -z "$vng" ]; then
    echo "run-guest: vng (virtme-ng) not found; run tests/vm/setup.sh" >&2
    exit 2
fi

kernel=${XFER_VM_KERNEL:-}
if [ -z "$kernel" ]; then
    # The host's running kernel is not a Debian one; use the one linux-image-amd64 put in /boot.
    kernel=$(ls /boot/vmlinuz-*-amd64 2>/dev/null | sort -V | tail -n 1)
fi
if [ -z "$kernel" ] || [ ! -r "$kernel" ]; then
    echo "run-guest: no Debian kernel in /boot (install linux-image-amd64: tests/vm/setup.sh)" >&2
    exit 2
fi
kver=${kernel##*/vmlinuz-}
if [ ! -d "/lib/modules/$kver" ]; then
    echo "run-guest: /lib/modules/$kver missing for $kernel" >&2
    exit 2
fi

# --- results dir shared with the guest ------------------------------------------------
if [ -n "${XFER_VM_RESULTS:-}" ]; then
    results=$XFER_VM_RESULTS
    mkdir -p "$results"
    results=$(readlink -f "$results")
    rm -f "$results/exit_code" "$results/exit_code.tmp" "$results/started" "$results/rxe.log"
    keep=1
else
    results=$(mktemp -d /tmp/xfer-vm.XXXXXX)
    keep=0
fi
case $results in
*[[:space:]\'\"\\]*)
    echo "run-guest: results dir path must not contain spaces or quotes: $results" >&2
    exit 2
    ;;
esac
# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
    [ -n "${ctl:-}" ] && rm -rf "$ctl"
    [ "$keep" = 1 ] || rm -rf "$results"
}
trap cleanup EXIT

XFER_GUEST_ARGV=("$script" "$@")
XFER_GUEST_CWD=$PWD
XFER_GUEST_PATH=$PATH
declare -p XFER_GUEST_ARGV XFER_GUEST_CWD XFER_GUEST_PATH >"$results/guest.env"
# The guest does not inherit this environment: forward the XFER_* settings (knobs of the
# guest scripts, XFER_LOG, provider settings) and RUST_BACKTRACE/RUST_LOG. Not the
# host-side knobs below; guest-init's own exports (XFER_VERBS_DEVICE, ...) win.
forward=()
for v in $(compgen -e); do
    case $v in
    XFER_VM_TIMEOUT | XFER_VM_RESULTS | XFER_VM_KERNEL | XFER_VM_MEMORY | XFER_VM_CPUS | XFER_VM_VERBOSE | \
        XFER_VM_APPEND | XFER_GUEST_*) ;;
    XFER_* | RUST_BACKTRACE | RUST_LOG) forward+=("$v") ;;
    esac
done
[ ${#forward[@]} -gt 0 ] && declare -p "${forward[@]}" >>"$results/guest.env"

timeout_s=${XFER_VM_TIMEOUT:-1500}
vng_args=(
    --run "$kernel" --disable-kvm --force-9p --disable-microvm
    --memory "${XFER_VM_MEMORY:-2G}" --cpus "${XFER_VM_CPUS:-2}"
    --rwdir "$results"
    --exec "'$here/guest-init.sh' '$results'"
)
# Extra kernel command line. tsc=reliable: under TCG the kernel otherwise finds the
# vCPUs' TSCs "unsynchronized", falls back to the HPET clocksource, and every
# clock_gettime() becomes an emulated HPET read of ~4 us instead of a vDSO rdtsc (~30 ns
# here), which would distort any program that reads the clock per operation.
for a in ${XFER_VM_APPEND-tsc=reliable}; do vng_args+=(--append "$a"); done
[ "${XFER_VM_VERBOSE:-0}" = 1 ] && vng_args=(--verbose "${vng_args[@]}")

# One guest at a time on this machine: two TCG guests on 2 cores starve each other and
# every timing inside them. The lock is held (fd 9, inherited by vng and QEMU) until the
# guest is gone; a second run-guest.sh waits here.
exec 9>"${XFER_VM_LOCK:-/tmp/xfer-vm.lock}"
if ! flock -n 9; then
    echo "run-guest: another guest is running; waiting for it" >&2
    flock 9
fi
echo "run-guest: booting $kver (TCG) for: ${XFER_GUEST_ARGV[*]}" >&2
start=$(date +%s)
# stdin from /dev/null: CI has none, and vng must not wait on a terminal.
# Output goes through a pipe: QEMU re-opens its stdout, so when stdout is a regular file
# it writes from offset 0 and overwrites what the shell wrote there (seen here). Through
# `cat` the guest's console is streamed to our stdout as it comes.
# `timeout` puts itself (and so vng and QEMU) in a process group of its own, which a
# Ctrl-C or a TERM to this script does not reach: on INT/TERM/HUP we signal it ourselves
# (it passes the signal on to vng and QEMU), so no guest outlives us. It runs in the
# background so that the trap runs at once instead of after the guest exits.
ctl=$(mktemp -d /tmp/xfer-vm-ctl.XXXXXX)
(
    timeout --kill-after=30 "$timeout_s" "$vng" "${vng_args[@]}" </dev/null 2>&1 &
    echo $! >"$ctl/pid"
    wait $!
    echo $? >"$ctl/rc"
) | cat &
pipe=$!
interrupted=
# shellcheck disable=SC2317  # invoked by the traps
stop_guest() {
    interrupted=$1
    [ -s "$ctl/pid" ] && kill -TERM "$(cat "$ctl/pid")" 2>/dev/null
}
trap 'stop_guest INT' INT
trap 'stop_guest TERM' TERM
trap 'stop_guest HUP' HUP
# `wait` returns early when a trapped signal arrives: wait again until the guest is gone.
wait "$pipe"
while kill -0 "$pipe" 2>/dev/null; do wait "$pipe"; done
trap - INT TERM HUP
vng_rc=$(cat "$ctl/rc" 2>/dev/null || echo 143)
rm -rf "$ctl"
elapsed=$(($(date +%s) - start))
if [ -n "$interrupted" ]; then
    echo "run-guest: got SIG$interrupted; guest stopped (${elapsed}s)" >&2
    exit $((128 + $(kill -l "$interrupted")))
fi

if [ -f "$results/exit_code" ]; then
    code=$(tr -d '[:space:]' <"$results/exit_code")
    if [ "$code" = setup-failed ]; then
        echo "run-guest: Soft-RoCE set-up failed in the guest (${elapsed}s)" >&2
        exit 120
    fi
    if ! [[ $code =~ ^[0-9]+$ ]]; then
        echo "run-guest: bad exit_code '$code' from guest" >&2
        exit 122
    fi
    [ "$vng_rc" != "$code" ] && echo "run-guest: note: vng exited $vng_rc, script reported $code" >&2
    booted=$(sed -n 's/.* at \([0-9.]*\)s$/\1/p' "$results/started" 2>/dev/null)
    echo "run-guest: script exited $code (${elapsed}s in all; guest up after ${booted:-?}s)" >&2
    exit "$code"
fi

if [ "$vng_rc" = 124 ] || [ "$vng_rc" = 137 ]; then
    echo "run-guest: timed out after ${timeout_s}s (vng rc $vng_rc)" >&2
    exit 124
fi
if [ ! -f "$results/started" ]; then
    echo "run-guest: guest failed to boot or never ran guest-init.sh (vng rc $vng_rc, ${elapsed}s)" >&2
    [ "${XFER_VM_VERBOSE:-0}" = 1 ] ||
        echo "run-guest: rerun with XFER_VM_VERBOSE=1 to see the guest kernel's boot log" >&2
    exit 121
fi
echo "run-guest: guest booted but the script never reported an exit status (vng rc $vng_rc, ${elapsed}s)" >&2
exit 122

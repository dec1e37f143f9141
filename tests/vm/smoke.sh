#!/usr/bin/env bash
# Guest script: prove the Soft-RoCE verbs stack works. Run it with
#   tests/vm/run-guest.sh tests/vm/smoke.sh
# Checks: rxe0 port ACTIVE; ibv_rc_pingpong (RC, verbs with a TCP out-of-band exchange);
# ib_send_lat (perftest). Server pinned to CPU 0, client to CPU 1.
set -u

if [ "${XFER_IN_GUEST:-0}" != 1 ]; then
    echo "smoke.sh: run this inside the guest: tests/vm/run-guest.sh $0" >&2
    exit 2
fi

dev=${XFER_VERBS_DEVICE:-rxe0}
gid=${RXE_GID_INDEX:-1}
addr=${XFER_RDMA_ADDR:-10.11.0.1}
failed=0
pass() { echo "smoke: PASS $1"; }
fail() { echo "smoke: FAIL $1"; failed=$((failed + 1)); }

wait_listen() { # PORT: wait up to 20 s for a TCP listener
    for _ in $(seq 1 200); do
        ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0
        sleep 0.1
    done
    return 1
}

# run_pair NAME PORT SERVER_CMD... -- CLIENT_CMD...
run_pair() {
    local name=$1 port=$2
    shift 2
    local srv=() cli=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do srv+=("$1"); shift; done
    shift
    cli=("$@")
    echo "=== $name"
    echo "+ server: taskset -c 0 ${srv[*]}"
    timeout 120 taskset -c 0 "${srv[@]}" >"/tmp/$name.server.log" 2>&1 &
    local spid=$!
    if ! wait_listen "$port"; then
        kill "$spid" 2>/dev/null
        wait "$spid" 2>/dev/null
        cat "/tmp/$name.server.log"
        fail "$name (server never listened on $port)"
        return
    fi
    echo "+ client: taskset -c 1 ${cli[*]}"
    timeout 120 taskset -c 1 "${cli[@]}" 2>&1
    local crc=$?
    wait "$spid"
    local src=$?
    echo "--- $name server output:"
    cat "/tmp/$name.server.log"
    if [ "$crc" = 0 ] && [ "$src" = 0 ]; then
        pass "$name"
    else
        fail "$name (client rc $crc, server rc $src)"
    fi
}

echo "=== ibv_devinfo -d $dev"
ibv_devinfo -d "$dev" | tee /tmp/devinfo.txt
if grep -q 'state:.*PORT_ACTIVE' /tmp/devinfo.txt; then pass "ibv_devinfo PORT_ACTIVE"; else fail "ibv_devinfo PORT_ACTIVE"; fi
echo "GID index $gid: $(cat "/sys/class/infiniband/$dev/ports/1/gids/$gid")" \
    "type $(cat "/sys/class/infiniband/$dev/ports/1/gid_attrs/types/$gid" 2>/dev/null)"

run_pair ibv_rc_pingpong 18515 \
    ibv_rc_pingpong -d "$dev" -g "$gid" -p 18515 -n 1000 -- \
    ibv_rc_pingpong -d "$dev" -g "$gid" -p 18515 -n 1000 "$addr"

run_pair ib_send_lat 18516 \
    ib_send_lat -d "$dev" -x "$gid" -n 1000 -p 18516 -- \
    ib_send_lat -d "$dev" -x "$gid" -n 1000 -p 18516 "$addr"

echo "=== smoke: $failed failure(s)"
[ "$failed" = 0 ]

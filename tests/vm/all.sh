#!/usr/bin/env bash
# Guest script: everything that needs the Soft-RoCE device, in ONE boot:
#   smoke        smoke.sh: rxe0 ACTIVE, ibv_rc_pingpong, ib_send_lat (the stack itself)
#   verbs        verbs.sh on each xfer-verbs integration test binary (providers/verbs/tests/
#                <name>.rs: rc), reported as verbs_<name>
#   conformance  the root crate's provider conformance suite over XFER_PROVIDER=verbs
#                (core's RDM engine over the verbs transport, providers/verbs/src/transport/)
#   peer_death   tests/peer_death.rs over XFER_PROVIDER=verbs (a peer process killed)
#   rdm          the engine's cases the other steps leave out: the conformance suite's
#                large-message cases with rendezvous READs of 4 KiB (rdm_read_chunks),
#                tests/flow_control.rs with an SRQ of 32 buffers (rdm_flow_control: the
#                receive-slot credit keeps a silent receiver's SRQ from running dry, no RNR
#                NAK), tests/tcp_stall.rs (rdm_stall: the progress timeout against a stopped
#                peer), the conformance suite's atomic cases with XFER_ATOMIC_MODE=device
#                (rdm_device_atomics: IBV_WR_ATOMIC_*); and over shm+verbs (shared memory to peers on this host, verbs to
#                others) the conformance suite with XFER_SHM_ENABLED=0
#                (rdm_shm_verbs_conformance) and tests/mixed.rs (rdm_mixed: a peer process
#                over shm, one over verbs, any-source receives)
#   scale        tests/scale.rs over XFER_PROVIDER=verbs: one endpoint, XFER_SCALE_PEERS (32)
#                peers; the hub's receive memory (its SRQ) must not grow with them
#   tcp_faults   tests/tcp_faults.rs: the TCP provider between two network namespaces
#                joined by a veth pair, under netem loss/delay/reordering/duplication
#                (the host kernel has no sch_netem), link down, SIGKILL and restart
#   aio          tests/aio.rs over XFER_PROVIDER=verbs: the async layer's futures, dropped
#                futures (cancelled receives, sends that still deliver), RMA futures
#   flow_control tests/flow_control.rs over XFER_PROVIDER=verbs with XFER_VERBS_EAGER_CREDIT=256k:
#                thousands of 4 KiB sends to a receiver that posts nothing (and for a while
#                does not even poll): its unexpected bytes stay within the credit, rxe0
#                reports no RNR NAK (rcvd_rnr_err), then everything arrives once, in order
#   teardown     tests/teardown.rs over XFER_PROVIDER=verbs: 120 drop orders of domain, CQ,
#                AV, async endpoint and dispatcher with thousands of operations in flight
#   rpc          examples/rpc/tests/rpc.rs over XFER_PROVIDER=verbs: tarpc over xfer, a server
#                and a client process with every call checked (0 B to 1 MiB), one-process
#                mode, a short benchmark run against tarpc on tokio TCP (loopback)
#   verbs_faults tests/verbs_faults.rs: the verbs provider between two rxe devices on a
#                veth pair under 5% netem loss, and with the link taken down mid-transfer
#                and brought back (RC keepalive, docs/FAULTS.md)
#   xfer_info    xfer-info with no XFER_PROVIDER/XFER_VERBS_DEVICE: must find rxe0 and
#                pick shm+verbs by itself
#   c_suite      the C suite (tests/c/test_capi.c) over XFER_PROVIDER=verbs, then the C
#                examples (pingpong, rma) as server and client processes over verbs
#   ofi          libfabric's fi_info and fi_pingpong (-e rdm, -m msg and -m tagged, two
#                processes) over libxfer_fi.so's verbs domain (docs/OFI.md), then the
#                libfabric C suite ofi/tests/c/fi_suite.c over it (RMA with FI_MR_LOCAL)
#   mpi          ofi/tests/mpi.rs over XFER_PROVIDER=verbs: Open MPI (pml cm, mtl ofi, provider
#                xfer) running mpi_check on 4 ranks (to XFER_MPI_MAX_BYTES, 16 MiB) and
#                NPopenmpi on 2 (to XFER_MPI_NETPIPE_MAX, 64 KiB here), each rank's xfer
#                endpoint logged as verbs and as having carried receives; mpi_onesided on 4
#                ranks over osc rdma, btl ofi (every rank but the target's endpoint carried
#                atomics over verbs) and over osc ucx on rc_verbs (the reference), then
#                again with XFER_ATOMIC_MODE=device (the atomics by rxe0)
# The binaries are built on the host by tests/vm/build-verbs.sh, whose KEY=PATH lines
# are this script's arguments:
#   tests/vm/run-guest.sh tests/vm/all.sh $(tests/vm/build-verbs.sh)
# Runs every step even if one fails, each under its own timeout; prints one
# "=== <step>: PASS|FAIL ..." line per step and a summary; exits nonzero if any failed.
#
# Knobs (set on the host: run-guest.sh forwards XFER_* variables into the guest):
#   XFER_VM_STEPS        steps to run, space- or comma-separated (default: all, above order);
#                        `verbs` runs every VERBS_* binary, `verbs_<name>` just that one
#   XFER_VM_PROVIDER     the provider the verbs steps (conformance to mpi, not rdm) run
#                        over: verbs (default) or shm+verbs
#   XFER_VM_CONFORMANCE_THREADS  --test-threads for the conformance suite (default 2: 35
#                        tests in ~9-10 s over rxe vs ~16 s with 1, both passing, measured)
#   XFER_VM_TIMEOUT_VERBS / _CONFORMANCE / _PEER_DEATH / _SCALE / _TCP_FAULTS / _AIO /
#                        _FLOW_CONTROL / _STALL (120) / _MIXED (120) / _TEARDOWN / _RPC / _VERBS_FAULTS / _XFER_INFO / _C_SUITE /
#                        _OFI / _MPI  per-step seconds (defaults 240 per verbs binary / 240 / 120 /
#                        180 / 300 / 180 / 120 / 300 / 120 / 300 / 60 / 300 / 300 / 400,
#                        3-10x what they took here; smoke.sh bounds its own)
#   XFER_VM_TEST_ARGS    extra arguments for the conformance binary (e.g. a test name filter)
set -u

usage() {
    echo "usage: all.sh KEY=PATH... (KEYs: VERBS_<NAME> CONFORMANCE PEER_DEATH SCALE TCP_FAULTS AIO FLOW_CONTROL STALL MIXED TEARDOWN RPC" \
        "VERBS_FAULTS XFER_INFO C_SUITE OFI MPI [XFER_PERF]; from tests/vm/build-verbs.sh on the host)" >&2
}
if [ "${XFER_IN_GUEST:-0}" != 1 ]; then
    echo "all.sh: run this inside the guest: tests/vm/run-guest.sh $0 \$(tests/vm/build-verbs.sh)" >&2
    exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

declare -A bin=()
verbs_tests=() # names (lower case) of the VERBS_<NAME> binaries, in argument order
for arg in "$@"; do
    case $arg in
    CONFORMANCE=* | PEER_DEATH=* | SCALE=* | TCP_FAULTS=* | AIO=* | FLOW_CONTROL=* | STALL=* | MIXED=* | TEARDOWN=* | RPC=* | VERBS_FAULTS=* | XFER_PERF=* | XFER_INFO=* | C_SUITE=* | OFI=* | MPI=*)
        bin[${arg%%=*}]=${arg#*=}
        ;;
    VERBS_?*=*)
        name=${arg%%=*}
        name=${name#VERBS_}
        verbs_tests+=("${name,,}")
        bin[${arg%%=*}]=${arg#*=}
        ;;
    *)
        echo "all.sh: unexpected argument: $arg" >&2
        usage
        exit 2
        ;;
    esac
done

vprov=${XFER_VM_PROVIDER:-verbs}
steps=${XFER_VM_STEPS:-smoke verbs conformance peer_death rdm scale tcp_faults aio flow_control teardown rpc verbs_faults xfer_info c_suite ofi mpi}
steps=${steps//,/ }
# `verbs` stands for one step per VERBS_<NAME> binary given.
expanded=
for s in $steps; do
    case $s in
    verbs)
        if [ ${#verbs_tests[@]} = 0 ]; then
            expanded+=" verbs_" # fails: no binary given
        else
            for t in "${verbs_tests[@]}"; do expanded+=" verbs_$t"; done
        fi
        ;;
    smoke | verbs_* | conformance | peer_death | rdm | scale | tcp_faults | aio | flow_control | teardown | rpc | xfer_info | c_suite | ofi | mpi) expanded+=" $s" ;;
    *)
        echo "all.sh: unknown step '$s' in XFER_VM_STEPS (smoke verbs verbs_<name> conformance" \
            "peer_death rdm scale tcp_faults aio flow_control teardown rpc verbs_faults xfer_info c_suite ofi mpi)" >&2
        exit 2
        ;;
    esac
done
steps=${expanded# }

passed=()
failed=()
times=()
prefix=
result() { # STEP RC [DETAIL]; reported as $prefix$STEP
    local step=$prefix$1 rc=$2 detail=${3:-}
    times+=("$step $(($(date +%s) - step_start))s")
    if [ "$rc" = 0 ]; then
        passed+=("$step")
        echo "=== $step: PASS"
    else
        failed+=("$step")
        echo "=== $step: FAIL${detail:+ ($detail)}"
    fi
}

# why RC SECONDS: a readable reason for a nonzero exit status of `timeout ... CMD`.
why() {
    case $1 in
    124 | 137) echo "timed out after $2 s" ;;
    *) echo "exit status $1" ;;
    esac
}

# need KEY STEP: the binary (or directory) for KEY, or a failure of STEP if it was not given.
need() {
    local path=${bin[$1]:-}
    if [ -z "$path" ]; then
        result "$2" 1 "no $1=PATH argument: build it with tests/vm/build-verbs.sh"
        return 1
    fi
    if [ ! -x "$path" ]; then
        result "$2" 1 "$1=$path is not executable"
        return 1
    fi
}

step_smoke() {
    bash "$here/smoke.sh"
    result smoke $?
}

# step_verbs NAME: one xfer-verbs integration test binary (VERBS_<NAME>).
step_verbs() {
    local name=$1 key step=verbs_$1
    key=VERBS_${name^^}
    if [ -z "$name" ]; then
        result verbs 1 "no VERBS_<NAME>=PATH argument: build them with tests/vm/build-verbs.sh"
        return
    fi
    need "$key" "$step" || return
    XFER_VERBS_TEST_TIMEOUT=${XFER_VM_TIMEOUT_VERBS:-240} bash "$here/verbs.sh" "${bin[$key]}"
    local rc=$?
    result "$step" "$rc" "$(why "$rc" "${XFER_VM_TIMEOUT_VERBS:-240}")"
}

# run_test STEP KEY THREADS TIMEOUT [ARGS...]: a root-package test binary over verbs
# (over $RUN_PROVIDER when set: shm+verbs).
run_test() {
    local step=$1 key=$2 threads=$3 t=$4 provider=${RUN_PROVIDER:-$vprov}
    shift 4
    need "$key" "$step" || return
    echo "+ XFER_PROVIDER=$provider timeout $t ${bin[$key]} --test-threads=$threads $*"
    # timeout signals its whole process group, so helper processes the test spawned
    # (peer_death's child_peer) go too.
    XFER_PROVIDER=$provider timeout -k 10 "$t" "${bin[$key]}" --test-threads="$threads" "$@"
    local rc=$?
    result "$step" "$rc" "$(why "$rc" "$t")"
}

step_conformance() {
    # rxe treats a transport retry count of 7 (the default) as "forever": its
    # responder stalls when a region is deregistered mid-READ
    # (rma_region_dropped_mid_transfer_is_safe), and only a finite count turns
    # that into an error. Real HCAs NAK such a READ at once.
    export XFER_VERBS_RETRY_CNT=${XFER_VERBS_RETRY_CNT:-6}
    # shellcheck disable=SC2086  # XFER_VM_TEST_ARGS is a word list on purpose
    run_test conformance CONFORMANCE "${XFER_VM_CONFORMANCE_THREADS:-2}" \
        "${XFER_VM_TIMEOUT_CONFORMANCE:-240}" ${XFER_VM_TEST_ARGS:-}
}

step_peer_death() {
    run_test peer_death PEER_DEATH 1 "${XFER_VM_TIMEOUT_PEER_DEATH:-120}"
}

# What the verbs steps do not cover of the RDM engine over verbs, each reported as
# rdm_<case>: rendezvous READs in small chunks, a receiver's SRQ shrunk below the eager
# credit, the progress timeout, and shm+verbs (the default where a device is usable).
step_rdm() {
    # Rendezvous READs in 4 KiB chunks: a 1 MiB message is 256 READs, more than the
    # initiator depth lets fly at once, so later chunks wait for earlier ones; native
    # RMA's WRITEs and READs are chunked alike.
    XFER_VERBS_READ_MAX=4096 run_test rdm_read_chunks CONFORMANCE 2 \
        "${XFER_VM_TIMEOUT_CONFORMANCE:-240}" a_large_message a_pull_asks_the_qp_state tagged_roundtrip_all_sizes untagged_messages_keep_order \
        rma_on_a_granted_key rma_write_and_read_all_sizes
    step_start=$(date +%s)
    # 32 buffers: fewer than the engine's 256 KiB of eager credit in 4 KiB messages, so
    # only the transport's slot credit stands between a silent receiver and RNR.
    XFER_VERBS_EAGER_CREDIT=256k XFER_VERBS_SRQ_SIZE=32 XFER_VERBS_SRQ_LOW_WATERMARK=8 \
        run_test rdm_flow_control FLOW_CONTROL 1 "${XFER_VM_TIMEOUT_FLOW_CONTROL:-120}" --nocapture
    step_start=$(date +%s)
    run_test rdm_stall STALL 1 "${XFER_VM_TIMEOUT_STALL:-120}" --nocapture
    # Atomics by the device (decision 202; the default mode is the target CPU's): every
    # atomic case of the conformance suite, the device-only one included.
    step_start=$(date +%s)
    XFER_ATOMIC_MODE=device run_test rdm_device_atomics CONFORMANCE 2 \
        "${XFER_VM_TIMEOUT_CONFORMANCE:-240}" atomic
    # shm+verbs: the conformance suite with shared memory off (every peer over the
    # pair's verbs side), then one endpoint serving a peer process over shared memory
    # and one over verbs.
    step_start=$(date +%s)
    # shellcheck disable=SC2086  # XFER_VM_TEST_ARGS is a word list on purpose
    XFER_SHM_ENABLED=0 RUN_PROVIDER=shm+verbs run_test rdm_shm_verbs_conformance CONFORMANCE \
        "${XFER_VM_CONFORMANCE_THREADS:-2}" "${XFER_VM_TIMEOUT_CONFORMANCE:-240}" ${XFER_VM_TEST_ARGS:-}
    step_start=$(date +%s)
    XFER_MIXED_PROVIDER=shm+verbs RUN_PROVIDER=shm+verbs run_test rdm_mixed MIXED 1 "${XFER_VM_TIMEOUT_MIXED:-120}" --nocapture
}

step_aio() {
    run_test aio AIO 1 "${XFER_VM_TIMEOUT_AIO:-180}"
}

step_flow_control() {
    # The budget the test checks the receiver's unexpected bytes against.
    XFER_VERBS_EAGER_CREDIT=256k run_test flow_control FLOW_CONTROL 1 "${XFER_VM_TIMEOUT_FLOW_CONTROL:-120}" --nocapture
}

step_teardown() {
    run_test teardown TEARDOWN 1 "${XFER_VM_TIMEOUT_TEARDOWN:-300}" --nocapture
}

# tarpc over xfer: the test spawns the xfer-rpc server and client (XFER_PROVIDER=verbs is
# inherited; they must report verbs); its tokio TCP baseline uses loopback.
step_rpc() {
    run_test rpc RPC 1 "${XFER_VM_TIMEOUT_RPC:-120}" --nocapture
}

step_scale() {
    # Every peer endpoint of the child process has its own SRQ: keep them small
    # (the hub's too; what is checked is that its receive memory stays fixed).
    XFER_SCALE_PEERS=${XFER_SCALE_PEERS:-32} XFER_VERBS_SRQ_SIZE=${XFER_VERBS_SRQ_SIZE:-64} \
        XFER_VERBS_SRQ_LOW_WATERMARK=${XFER_VERBS_SRQ_LOW_WATERMARK:-16} \
        run_test scale SCALE 1 "${XFER_VM_TIMEOUT_SCALE:-180}" --nocapture
}

# TCP, not verbs: two network namespaces joined by a veth pair, faults injected with tc and
# ip (tests/tcp_faults.rs, docs/FAULTS.md). Here every case must really run: a missing
# prerequisite (root, iproute2, the netem qdisc) fails instead of skipping.
step_tcp_faults() {
    need TCP_FAULTS tcp_faults || return
    local t=${XFER_VM_TIMEOUT_TCP_FAULTS:-300} rc
    # The kernel would load these on first use too; loading them up front makes a
    # missing module a clear message here rather than a failed tc or ip command.
    for m in veth sch_netem sch_tbf; do
        modprobe "$m" || echo "tcp_faults: modprobe $m failed" >&2
    done
    echo "+ XFER_FAULTS_REQUIRE=1 XFER_FAULTS_REQUIRE_NETEM=1 timeout $t ${bin[TCP_FAULTS]} --test-threads=1 --nocapture"
    XFER_FAULTS_REQUIRE=1 XFER_FAULTS_REQUIRE_NETEM=1 timeout -k 10 "$t" "${bin[TCP_FAULTS]}" \
        --test-threads=1 --nocapture
    rc=$?
    result tcp_faults "$rc" "$(why "$rc" "$t")"
}

# Verbs between two rxe devices on a veth pair, under netem loss and link down
# (tests/verbs_faults.rs, docs/FAULTS.md); every case must really run here.
step_verbs_faults() {
    need VERBS_FAULTS verbs_faults || return
    local t=${XFER_VM_TIMEOUT_VERBS_FAULTS:-300} rc
    for m in veth sch_netem; do
        modprobe "$m" || echo "verbs_faults: modprobe $m failed" >&2
    done
    # The netem case's own wait gets two fifths of the step's time, so that a hang there fails
    # with both workers' counters (and the link-down case still runs) before this timeout.
    local nt=${XFER_FAULTS_NETEM_TIMEOUT:-$((t * 2 / 5))}
    echo "+ XFER_FAULTS_REQUIRE=1 XFER_FAULTS_REQUIRE_NETEM=1 XFER_FAULTS_NETEM_TIMEOUT=$nt timeout $t ${bin[VERBS_FAULTS]} --test-threads=1 --nocapture"
    XFER_FAULTS_NETEM_TIMEOUT=$nt \
        XFER_FAULTS_PROVIDER=$vprov XFER_FAULTS_REQUIRE=1 XFER_FAULTS_REQUIRE_NETEM=1 timeout -k 10 "$t" "${bin[VERBS_FAULTS]}" \
        --test-threads=1 --nocapture
    rc=$?
    result verbs_faults "$rc" "$(why "$rc" "$t")"
}

step_xfer_info() {
    need XFER_INFO xfer_info || return
    local t=${XFER_VM_TIMEOUT_XFER_INFO:-60} out rc
    # Nothing forced: xfer-info must find rxe0 and prefer shm+verbs on its own.
    echo "+ env -u XFER_PROVIDER -u XFER_VERBS_DEVICE timeout $t ${bin[XFER_INFO]}"
    out=$(env -u XFER_PROVIDER -u XFER_VERBS_DEVICE timeout -k 5 "$t" "${bin[XFER_INFO]}" 2>&1)
    rc=$?
    printf '%s\n' "$out"
    if [ "$rc" != 0 ]; then
        result xfer_info "$rc" "$(why "$rc" "$t")"
    elif ! grep -q '^open_default() picks: shm+verbs' <<<"$out"; then
        result xfer_info 1 "open_default() did not pick shm+verbs: $(grep '^open_default() picks:' <<<"$out")"
    elif ! grep -qw rxe0 <<<"$out"; then
        result xfer_info 1 "rxe0 is not listed"
    else
        result xfer_info 0
    fi
}

# left DEADLINE: seconds until DEADLINE (epoch seconds), at least 1 (timeout 0 means none).
left() {
    local l=$(($1 - $(date +%s)))
    [ "$l" -ge 1 ] || l=1
    echo "$l"
}

# c_example NAME DEADLINE CLIENT_ARGS...: the C example NAME (in the C_SUITE directory) as
# a server and a client process over verbs; prints both sides' output; fails unless both
# exit 0. The server prints "NAME server: HEXNAME" first.
c_example() {
    local name=$1 deadline=$2 dir=${bin[C_SUITE]} out server_name server rc=0 i
    shift 2
    out=$(mktemp /tmp/c-example.XXXXXX)
    timeout -k 5 "$(left "$deadline")" "$dir/$name" server >"$out" 2>&1 &
    server=$!
    for i in $(seq 1 300); do
        server_name=$(sed -n "s/^$name server: \([0-9a-f]*\)\$/\1/p" "$out" | head -n 1)
        [ -n "$server_name" ] && break
        kill -0 "$server" 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$server_name" ]; then
        echo "c_suite: the $name server printed no name" >&2
        rc=1
    else
        echo "+ $dir/$name client $server_name $*"
        timeout -k 5 "$(left "$deadline")" "$dir/$name" client "$server_name" "$@" || rc=1
    fi
    wait "$server" || rc=1
    sed "s/^/[$name server] /" "$out"
    rm -f "$out"
    return "$rc"
}

step_c_suite() {
    need C_SUITE c_suite || return
    local t=${XFER_VM_TIMEOUT_C_SUITE:-300} dir=${bin[C_SUITE]} log rc deadline
    deadline=$(($(date +%s) + t))
    log=$(mktemp /tmp/c-suite.XXXXXX)
    # As for the conformance step: rxe must turn a stalled READ into an error.
    echo "+ XFER_PROVIDER=$vprov timeout $t $dir/test_capi"
    XFER_PROVIDER=$vprov XFER_VERBS_RETRY_CNT=${XFER_VERBS_RETRY_CNT:-6} \
        timeout -k 10 "$t" "$dir/test_capi" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    if [ "$rc" != 0 ]; then
        result c_suite "$rc" "test_capi: $(why "$rc" "$t")"
    elif ! grep -q "^provider: $vprov\$" "$log"; then
        result c_suite 1 "test_capi did not run over $vprov: $(grep '^provider:' "$log")"
    elif ! XFER_PROVIDER=$vprov c_example pingpong "$deadline" 200 4096; then
        result c_suite 1 "the pingpong example failed"
    elif ! XFER_PROVIDER=$vprov c_example rma "$deadline" 100000; then
        result c_suite 1 "the rma example failed"
    else
        result c_suite 0
    fi
    rm -f "$log"
}

# listening PORT: whether a TCP socket listens on PORT (without connecting to it: a probe
# connection would be taken for fi_pingpong's peer).
listening() {
    grep -qE "^ *[0-9]+: [0-9A-F]+:$(printf '%04X' "$1") [0-9A-F]+:[0-9A-F]+ 0A " /proc/net/tcp
}
# ofi_pingpong MODE PORT DEADLINE: fi_pingpong -p xfer -d verbs -e rdm -m MODE as a server
# and a client process, control connection on XFER_RDMA_ADDR:PORT; fails unless both exit 0.
ofi_pingpong() {
    local mode=$1 port=$2 deadline=$3 out server rc=0 i
    local args=(-p xfer -d "$vprov" -e rdm -m "$mode" -I 100 -c)
    out=$(mktemp /tmp/ofi-server.XXXXXX)
    echo "+ fi_pingpong ${args[*]} -B $port & fi_pingpong ${args[*]} -P $port $XFER_RDMA_ADDR"
    timeout -k 5 "$(left "$deadline")" fi_pingpong "${args[@]}" -B "$port" >"$out" 2>&1 &
    server=$!
    for i in $(seq 1 300); do
        listening "$port" && break
        kill -0 "$server" 2>/dev/null || break
        sleep 0.1
    done
    timeout -k 5 "$(left "$deadline")" fi_pingpong "${args[@]}" -P "$port" "$XFER_RDMA_ADDR" || rc=1
    wait "$server" || rc=1
    sed "s/^/[fi_pingpong server] /" "$out"
    rm -f "$out"
    return "$rc"
}
# ofi_suite DEADLINE: ofi/tests/c/fi_suite.c over xfer's verbs domain (messages, probes,
# blocking reads, then RMA with FI_MR_LOCAL descriptors); fails unless it passes.
ofi_suite() {
    echo "+ XFER_PROVIDER=$vprov XFER_SUITE_DOMAIN=$vprov ${bin[OFI]}/fi_suite"
    XFER_PROVIDER=$vprov XFER_SUITE_DOMAIN=$vprov timeout -k 5 "$(left "$1")" "${bin[OFI]}/fi_suite"
}
step_ofi() {
    need OFI ofi || return
    local t=${XFER_VM_TIMEOUT_OFI:-300} deadline out
    deadline=$(($(date +%s) + t))
    export FI_PROVIDER_PATH=${bin[OFI]} FI_PROVIDER=xfer
    echo "+ FI_PROVIDER_PATH=$FI_PROVIDER_PATH fi_info -p xfer"
    out=$(XFER_PROVIDER=$vprov timeout -k 5 60 fi_info -p xfer 2>&1)
    printf '%s\n' "$out"
    if ! grep -qE "domain: $vprov[[:space:]]*\$" <<<"$out"; then
        result ofi 1 "fi_info -p xfer lists no $vprov domain"
    elif ! ofi_pingpong msg 47601 "$deadline"; then
        result ofi 1 "fi_pingpong -m msg failed"
    elif ! ofi_pingpong tagged 47602 "$deadline"; then
        result ofi 1 "fi_pingpong -m tagged failed"
    elif ! ofi_suite "$deadline"; then
        result ofi 1 "the libfabric C suite (fi_suite) failed over verbs"
    else
        result ofi 0
    fi
    unset FI_PROVIDER_PATH FI_PROVIDER
}
# Open MPI over libxfer_fi.so's verbs domain: the test binary (ofi/tests/mpi.rs) runs
# mpirun itself and checks every rank's xfer endpoint carried its traffic over verbs.
# 4 ranks on the guest's 2 vCPUs under TCG (--oversubscribe); NetPIPE's sweep kept short.
# The one-sided test's reference, osc ucx, runs UCX over rc_verbs on rxe0 (TESTING.md);
# the one-sided test runs once more with XFER_ATOMIC_MODE=device over verbs (the ranks'
# fetch-and-ops by rxe0's atomics).
step_mpi() {
    need MPI mpi || return
    local t=${XFER_VM_TIMEOUT_MPI:-400} dir=${bin[MPI]} rc deadline
    deadline=$(($(date +%s) + t))
    export UCX_TLS=rc_v,self UCX_NET_DEVICES=$XFER_VERBS_DEVICE:$XFER_VERBS_PORT UCX_UD_VERBS_ETH_DGID_CHECK=n
    echo "+ UCX_TLS=$UCX_TLS UCX_NET_DEVICES=$UCX_NET_DEVICES XFER_PROVIDER=$vprov XFER_OFI_TEST_DIR=$dir timeout $t $dir/mpi-test --test-threads=1 --nocapture"
    XFER_PROVIDER=$vprov XFER_OFI_TEST_DIR=$dir \
        XFER_MPI_MAX_BYTES=${XFER_MPI_MAX_BYTES:-16777216} XFER_MPI_NETPIPE_MAX=${XFER_MPI_NETPIPE_MAX:-65536} \
        timeout -k 10 "$t" "$dir/mpi-test" --test-threads=1 --nocapture
    rc=$?
    if [ "$rc" = 0 ] && [ "$vprov" = verbs ]; then
        t=$((deadline - $(date +%s)))
        [ "$t" -gt 10 ] || t=10
        echo "+ XFER_ATOMIC_MODE=device XFER_PROVIDER=$vprov XFER_OFI_TEST_DIR=$dir timeout $t $dir/mpi-test --exact mpi_onesided_four_ranks --nocapture"
        XFER_ATOMIC_MODE=device XFER_PROVIDER=$vprov XFER_OFI_TEST_DIR=$dir \
            timeout -k 10 "$t" "$dir/mpi-test" --exact mpi_onesided_four_ranks --nocapture
        rc=$?
    fi
    unset UCX_TLS UCX_NET_DEVICES UCX_UD_VERBS_ETH_DGID_CHECK
    result mpi "$rc" "$(why "$rc" "$t")"
}
echo "all.sh: steps: $steps"
for s in $steps; do
    echo
    echo "=== $s"
    step_start=$(date +%s)
    case $s in
    verbs_faults) step_verbs_faults ;; # a root-package test, not an xfer-verbs binary
    verbs_*) step_verbs "${s#verbs_}" ;;
    *) "step_$s" ;;
    esac
done

echo
echo "=== step times: $(IFS=,; echo "${times[*]}")" | sed 's/,/, /g'
if [ ${#failed[@]} = 0 ]; then
    echo "=== all: PASS (${passed[*]})"
else
    echo "=== all: FAIL: ${failed[*]}${passed[*]:+ (passed: ${passed[*]})}"
fi
[ ${#failed[@]} = 0 ]

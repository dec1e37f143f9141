#!/usr/bin/env bash
# Guest: run one test binary N times in one boot and count how each run ended, to
# measure a flaky case (docs/FAULTS.md: the verbs link-down case, 20+ runs).
#
# usage (host):
#   bins=$(tests/vm/build-verbs.sh --only VERBS_FAULTS --locked)
#   XFER_REPEAT=20 tests/vm/run-guest.sh tests/vm/repeat.sh ${bins#*=} link_down_mid_transfer
# Runs `BIN ARGS... --test-threads=1 --nocapture` XFER_REPEAT times (default 10), each
# under `timeout XFER_REPEAT_TIMEOUT` (default 180 s; exit 124 counts as a hang), with
# XFER_FAULTS_REQUIRE=1 and the modules the fault tests need loaded. Prints each run's
# exit status and wall time, then `repeat: P passed, F failed, H hung of N`; exits 0 only
# if every run passed. Keep N small enough that the guest lock is not held for more than
# about 15 minutes.
set -uo pipefail

bin=${1:?usage: repeat.sh BIN [ARGS...]}
shift
n=${XFER_REPEAT:-10}
t=${XFER_REPEAT_TIMEOUT:-180}
for m in veth sch_netem; do
    modprobe "$m" 2>/dev/null || echo "repeat: modprobe $m failed" >&2
done
pass=0 fail=0 hung=0
for i in $(seq 1 "$n"); do
    start=$(date +%s.%N)
    XFER_FAULTS_REQUIRE=1 timeout -k 10 "$t" "$bin" "$@" --test-threads=1 --nocapture
    rc=$?
    took=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    case $rc in
        0) pass=$((pass + 1)) ;;
        124 | 137) hung=$((hung + 1)) ;;
        *) fail=$((fail + 1)) ;;
    esac
    echo "repeat: run $i/$n exit $rc in ${took}s"
done
echo "repeat: $pass passed, $fail failed, $hung hung of $n"
[ "$pass" = "$n" ]

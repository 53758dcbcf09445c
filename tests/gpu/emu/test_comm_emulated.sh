#!/usr/bin/env bash
# The comm layer's NCCL backend (gpu/comm/comm_nccl.c) on the CPU: every
# collective of tests/comm/comm_check.c, sync and async, at 1, 7, 1000 and
# 1,000,003 floats, with device buffers, through the emulated NCCL
# (tests/gpu/emu/nccl.cpp: real processes, shared memory) and CUDA
# runtime: under mpirun with 1, 2 and 4 ranks, with 3 in 4 KiB steps, and
# with 3 ranks started by hand that meet through comm_nccl.c's rendezvous
# directory. Point to point too, at 1 byte and at 31, 4003 and 4,000,015
# bytes (more than one of the emulated NCCL's 1 MiB slots): around the
# ring, isends crossing the neighbours' before the recvs, irecvs posted
# first and polled with comm_test, then blocking sends and recvs; and
# comm_split by parity, with an all-reduce and a ring of messages on each
# part and an all-reduce on the parent beside them. Then the
# failure paths, each provoked: one rank of three hangs, SIGKILLs itself,
# exits, aborts or leaves the communicator before an allreduce the others
# enter, or never starts, or the ranks' allreduces differ; the gang must
# end non-zero within 30 s and the survivors that got to speak must say,
# through comm_nccl.c, what NCCL said and why. Host buffers are refused.
# Last: nothing of these runs is left in /dev/shm. The ctest
# gpu/comm_emulated.
. "$DAGRUN_SOURCE_DIR/tests/integration/lib.sh"

CHECK=${COMM_CHECK_EMULATED:?COMM_CHECK_EMULATED must name comm_check_emulated (ctest sets it)}
[ -x "$CHECK" ] || fail "no $CHECK (build the comm_check_emulated target)"
use_mpirun
# The segments of other programs (another gang under ctest -j), or of an
# earlier run, are not this test's business: this run's carry its tag.
export DAGRUN_EMU_NCCL_SHM_TAG="t$$"
SHM_MINE="^dagrun-nccl-$DAGRUN_EMU_NCCL_SHM_TAG-"


# rdv_run NAME SIZE STARTED MODE: ranks 0..STARTED-1 of a gang of SIZE,
# each started alone (no MPI) with COMM_CHECK_RENDEZVOUS, under `timeout
# 60`; their exit codes in RCS (rank order), their output together in
# $T/NAME.out, seconds until the last ended in SECS.
rdv_run() {
  local name=$1 size=$2 started=$3 mode=$4 r p t0 t1 pids=()
  mkdir "$T/$name.rdv"
  t0=$(date +%s%N)
  for ((r = 0; r < started; r++)); do
    COMM_CHECK_RENDEZVOUS="$T/$name.rdv" COMM_CHECK_RANK=$r \
      COMM_CHECK_SIZE=$size timeout 60 "$CHECK" nccl "$mode" \
      >"$T/$name.$r.out" 2>&1 &
    pids+=($!)
  done
  RCS=()
  for p in "${pids[@]}"; do
    set +e
    wait "$p"
    RCS+=($?)
    set -e
  done
  t1=$(date +%s%N)
  SECS=$(((t1 - t0) / 1000000000))
  for ((r = 0; r < started; r++)); do cat "$T/$name.$r.out"; done >"$T/$name.out"
}

for np in 1 2 4; do
  run_timed "np$np" "${MPIRUN[@]}" -np "$np" "$CHECK" nccl
  [ "$RC" -eq 0 ] || fail "np$np: exit code $RC
$(cat "$T/np$np.out")"
  expect_in "$T/np$np.out" "comm_check: nccl size $np: ok"
  echo "np$np: ok in $SECS s"
done

# Slots of 4 KiB: every collective above 1024 floats (reduce-scatter: 341
# per rank) in many steps, with their boundaries at odd places.
run_timed small-slots env DAGRUN_EMU_NCCL_SLOT_BYTES=4096 "${MPIRUN[@]}" -np 3 "$CHECK" nccl
[ "$RC" -eq 0 ] || fail "small-slots: exit code $RC
$(cat "$T/small-slots.out")"
expect_in "$T/small-slots.out" "comm_check: nccl size 3: ok"
echo "small-slots: ok in $SECS s"

# The tag reaches mpirun's ranks (else the /dev/shm check at the end
# would look for names nobody makes): a bad one is refused by each.
run_timed bad-tag env DAGRUN_EMU_NCCL_SHM_TAG=Bad "${MPIRUN[@]}" -np 2 "$CHECK" nccl
[ "$RC" -ne 0 ] || fail "bad-tag: exit code 0
$(cat "$T/bad-tag.out")"
expect_in "$T/bad-tag.out" 'DAGRUN_EMU_NCCL_SHM_TAG must be at most 16 lower-case letters and digits, not "Bad"'
echo "bad-tag: exit $RC in $SECS s"

rdv_run rdv3 3 3 all
[ "${RCS[*]}" = "0 0 0" ] || fail "rdv3: exit codes ${RCS[*]}
$(cat "$T/rdv3.out")"
expect_in "$T/rdv3.out" "comm_check: nccl size 3: ok"
echo "rdv3: ok in $SECS s"

# From here on, the emulated NCCL's own timeout (a peer that does not
# arrive) is short; the runs above keep the default 30 s, room for a
# loaded machine.
export DAGRUN_EMU_NCCL_TIMEOUT_S=3

# What a survivor says (comm_check's die(), comm_nccl.c's ncclerr() with
# ncclGetErrorString and ncclGetLastError), and why.
SAID="comm nccl: allreduce: remote process exited or there was a network error: emulated NCCL:"
GONE="peer rank 2 (pid"
LATE="did not arrive within 3 s (DAGRUN_EMU_NCCL_TIMEOUT_S)"
DEAD="its process is gone (exited or killed)"

# ended_in_time NAME: the gang ended by itself, non-zero, within 30 s,
# and no survivor's allreduce returned as if all was well.
ended_in_time() {
  local name=$1
  [ "$RC" -ne 124 ] && [ "$RC" -ne 137 -o "$SECS" -lt 59 ] ||
    fail "$name: still running after 60 s (a hang)
$(cat "$T/$name.out")"
  [ "$RC" -ne 0 ] || fail "$name: exit code 0 with a rank gone
$(cat "$T/$name.out")"
  [ "$SECS" -lt 30 ] || fail "$name: the gang took $SECS s to end (want < 30)
$(cat "$T/$name.out")"
  expect_not_in "$T/$name.out" "the allreduce returned"
}

# fail_run NAME WHY MUST_SAY MPIRUN_ARGS...: rank 2 of 3 fails before an
# allreduce. MUST_SAY=1: a survivor must have said so, with WHY; else
# (mpirun may kill the survivors first) whatever a survivor said about
# the allreduce must be that.
fail_run() {
  local name=$1 why=$2 must=$3
  shift 3
  run_timed "$name" env COMM_CHECK_TIMEOUT=3 "${MPIRUN[@]}" "$@"
  ended_in_time "$name"
  if [ "$must" = 1 ] || grep -q "comm_check: rank .*allreduce" "$T/$name.out"; then
    expect_in "$T/$name.out" "$SAID"
    expect_in "$T/$name.out" "$GONE"
    if [ "$must" = 1 ]; then expect_in "$T/$name.out" "$why"; fi
  fi
  echo "$name: exit $RC after $SECS s"
}

# Rank 2 sleeps: the others' allreduce gives up after the emulated NCCL's
# timeout, says so and aborts the gang.
fail_run hang "$LATE" 1 -np 3 "$CHECK" nccl hang
# Rank 2 is killed; mpirun told not to end the job for it: the survivors
# see the peer's process gone, say so and abort the gang.
fail_run kill-seen "$DEAD" 1 --mca orte_abort_on_non_zero_status 0 -np 3 "$CHECK" nccl die-kill
# The same with mpirun's defaults: mpirun or the survivors, whichever first.
fail_run kill "$DEAD" 0 -np 3 "$CHECK" nccl die-kill
fail_run exit "$DEAD" 0 -np 3 "$CHECK" nccl die-exit

# Without mpirun nobody ends the survivors but themselves: each must see
# the failure, say it and exit 3 (comm_abort).
rdv_fail() {
  local name=$1 mode=$2 why=$3 victim_rc=$4
  RC=1
  rdv_run "$name" 3 3 "$mode"
  ended_in_time "$name"
  [ "${RCS[0]} ${RCS[1]}" = "3 3" ] ||
    fail "$name: survivors' exit codes ${RCS[0]} ${RCS[1]}, want 3 3
$(cat "$T/$name.out")"
  [ "${RCS[2]}" = "$victim_rc" ] ||
    fail "$name: rank 2's exit code ${RCS[2]}, want $victim_rc"
  # Each survivor says what failed; the first to see it says why (the
  # other may see that one's ncclCommAbort first and name it; an abort
  # is always blamed on the first rank that aborted).
  for r in 0 1; do
    expect_in "$T/$name.$r.out" "comm_check: rank $r: allreduce: $SAID"
  done
  expect_in "$T/$name.out" "$GONE"
  expect_in "$T/$name.out" "$why"
  echo "$name: survivors exit 3 after $SECS s"
}
rdv_fail rdv-kill die-kill "$DEAD" 137
rdv_fail rdv-exit die-exit "$DEAD" 0
# Rank 2 aborts (comm_abort: ncclCommAbort, exit 4): the others' allreduce
# fails as NCCL's does when a peer's connections go.
rdv_fail rdv-abort abort "it aborted the communicator (ncclCommAbort)" 4
# Rank 2 destroys the communicator (finalize, destroy) and exits 0: the
# ranks' collectives differ, and the others must not wait for it.
rdv_fail rdv-leave leave "it left the communicator (ncclCommFinalize/ncclCommDestroy) with this collective not done" 0

# Rank 2's allreduce has 999 elements, the others' 1000: every rank's call
# fails (NCCL would hang or corrupt memory), none hangs.
rdv_run rdv-mismatch 3 3 mismatch
RC=1
ended_in_time rdv-mismatch
[ "${RCS[*]}" = "3 3 3" ] || fail "rdv-mismatch: exit codes ${RCS[*]}, want 3 3 3
$(cat "$T/rdv-mismatch.out")"
for r in 0 1 2; do
  expect_in "$T/rdv-mismatch.$r.out" "comm_check: rank $r: allreduce: comm nccl: allreduce: invalid usage: emulated NCCL: rank $r: collective #2 is AllReduce of"
  expect_in "$T/rdv-mismatch.$r.out" "every rank must call the same collectives in the same order"
done
echo "rdv-mismatch: exit 3 3 3 after $SECS s"

# rdv_ended NAME MODE CODES: three ranks through the rendezvous in MODE;
# the gang ends by itself within 30 s with exit codes CODES.
rdv_ended() {
  rdv_run "$1" 3 3 "$2"
  RC=1
  ended_in_time "$1"
  [ "${RCS[*]}" = "$3" ] || fail "$1: exit codes ${RCS[*]}, want $3
$(cat "$T/$1.out")"
}

# Point to point: rank 2 is killed while ranks 0 and 1 receive from it:
# their recvs fail (the peer's process gone, or the other survivor's
# abort), each says so and exits 3.
# rdv_killed NAME MODE CALL SAID: rank 2 kills itself in MODE; ranks 0
# and 1's CALL fails with NCCL's remote error, and the emulator's text
# after "rank R: " begins with SAID; the gang ends 3 3 137.
rdv_killed() {
  local name=$1 call=$3 said=$4 r
  rdv_ended "$name" "$2" "3 3 137"
  for r in 0 1; do
    expect_in "$T/$name.$r.out" "comm_check: rank $r: $call: comm nccl: $call: remote process exited or there was a network error: emulated NCCL: rank $r: $said"
  done
  expect_in "$T/$name.out" "$DEAD"
  echo "$name: exit 3 3 137 after $SECS s"
}
rdv_killed rdv-recv-kill recv-kill recv "Recv #1 from peer rank 2"

# Rank 0 sends 1000 bytes, rank 1 receives 999: both calls fail (NCCL
# would hang or corrupt memory), rank 2's barrier sees their aborts.
rdv_ended rdv-p2p-mismatch p2p-mismatch "3 3 3"
expect_in "$T/rdv-p2p-mismatch.0.out" "comm_check: rank 0: send: comm nccl: send: invalid usage: emulated NCCL: rank 0: Send #1 to peer 1 is 1000 elements of type 1 here, its Recv 999"
expect_in "$T/rdv-p2p-mismatch.1.out" "comm_check: rank 1: recv: comm nccl: recv: invalid usage: emulated NCCL: rank 1: Recv #1 from peer 0 is 999 elements of type 1 here, its Send 1000"
expect_in "$T/rdv-p2p-mismatch.1.out" "a send and its recv must have the same count and type"
echo "rdv-p2p-mismatch: exit 3 3 3 after $SECS s"

# Rank 2 is killed while ranks 0 and 1 split the communicator: their
# split fails (NCCL's is collective over the parent), each says so.
rdv_killed rdv-split-kill split-kill split "CommSplit #2: peer rank"

# Host memory handed to the NCCL backend is refused on every rank, before
# any rank waits: what makes the runs above a check that comm_check's
# buffers, and comm_nccl.c's, are device memory.
rdv_run rdv-host 3 3 host-buffer
[ "${RCS[*]}" = "0 0 0" ] || fail "rdv-host: exit codes ${RCS[*]}, want 0 0 0
$(cat "$T/rdv-host.out")"
for r in 0 1 2; do
  expect_in "$T/rdv-host.$r.out" "comm_check: rank $r: host buffer refused: comm nccl: allreduce: invalid argument: emulated NCCL: AllReduce: sendbuff"
  expect_in "$T/rdv-host.$r.out" "is not device memory"
done
echo "rdv-host: refused on every rank in $SECS s"
# Rank 2 sleeps a minute (timeout ends it at 60 s: 124); the survivors
# give up at 3 s. Only their time counts here.
rdv_hang() {
  local t0 t1 r pids=() name=rdv-hang
  mkdir "$T/$name.rdv"
  t0=$(date +%s%N)
  for r in 0 1 2; do
    COMM_CHECK_RENDEZVOUS="$T/$name.rdv" COMM_CHECK_RANK=$r COMM_CHECK_SIZE=3 \
      timeout 60 "$CHECK" nccl hang >"$T/$name.$r.out" 2>&1 &
    pids+=($!)
  done
  for r in 0 1; do
    set +e
    wait "${pids[$r]}"
    RC=$?
    set -e
    [ "$RC" -eq 3 ] || fail "$name: rank $r: exit code $RC, want 3
$(cat "$T/$name.$r.out")"
    expect_in "$T/$name.$r.out" "comm_check: rank $r: allreduce: $SAID"
  done
  cat "$T/$name.0.out" "$T/$name.1.out" >"$T/$name.out"
  expect_in "$T/$name.out" "$GONE"
  expect_in "$T/$name.out" "$LATE"
  t1=$(date +%s%N)
  kill "${pids[2]}" 2>/dev/null || true
  wait "${pids[2]}" 2>/dev/null || true
  SECS=$(((t1 - t0) / 1000000000))
  [ "$SECS" -lt 30 ] || fail "$name: the survivors took $SECS s (want < 30)"
  echo "$name: survivors exit 3 after $SECS s"
}
rdv_hang

# Rank 2 never starts: the communicator's creation fails on the others
# within the timeout, with NCCL's word for it.
rdv_run rdv-absent 3 2 all
RC=1
ended_in_time rdv-absent
[ "${RCS[*]}" = "2 2" ] || fail "rdv-absent: exit codes ${RCS[*]}, want 2 2
$(cat "$T/rdv-absent.out")"
# The first to give up says why; the other may see its ncclCommAbort
# first.
for r in 0 1; do
  expect_in "$T/rdv-absent.$r.out" "comm_check: comm nccl: create: "
done
expect_in "$T/rdv-absent.out" "comm nccl: create: unhandled system error: emulated NCCL: rank"
expect_in "$T/rdv-absent.out" "init: rank 2 of 3 did not join within 3 s (DAGRUN_EMU_NCCL_TIMEOUT_S)"
echo "rdv-absent: exit 2 2 after $SECS s"

# Nothing left in /dev/shm by any of these runs, the killed ones included.
left=$(ls /dev/shm | grep "$SHM_MINE" || true)
[ -z "$left" ] || fail "left in /dev/shm: $left"

pass

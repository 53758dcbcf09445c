#!/usr/bin/env bash
# The comm layer (gpu/comm/comm.h) through tests/comm/comm_check.c: every
# collective, sync and async, at sizes 1, 7, 1000 and 1,000,003 floats,
# checked exactly against what each rank computes alone, with the self
# backend, MPI as a singleton and under mpirun with 1, 2 and 4 ranks.
# Then the failure paths: one rank of three hangs, SIGKILLs itself or
# exits before an allreduce the others enter (timeout 3 s); the gang must
# end, non-zero, within 30 s, and where the survivors got to say it, they
# say the clear timeout message. (NCCL where it cannot run:
# tests/unit/test_comm.c; the NCCL backend on the CPU emulator, device
# buffers and all: tests/gpu/emu/test_comm_emulated.sh.)
. "$(dirname "$0")/lib.sh"

CHECK="$DAGRUN_BUILD_DIR/bin/comm_check"
[ -x "$CHECK" ] || fail "no $CHECK (build the comm_check target)"
use_mpirun


ok_run() {
  local name=$1 want=$2
  shift 2
  run_timed "$name" "$@"
  [ "$RC" -eq 0 ] || fail "$name: exit code $RC
$(cat "$T/$name.out")"
  expect_in "$T/$name.out" "$want"
}

ok_run self "comm_check: self size 1: ok" "$CHECK" self
ok_run singleton "comm_check: mpi size 1: ok" "$CHECK" mpi
for np in 1 2 4; do
  ok_run "np$np" "comm_check: mpi size $np: ok" "${MPIRUN[@]}" -np "$np" "$CHECK" mpi
done

MSG="comm mpi: allreduce: no answer from the other ranks in 3 s (a rank died?)"

# fail_run NAME MUST_SAY MPIRUN_ARGS...: rank 2 of 3 fails before an
# allreduce; the gang must end non-zero within 30 s; MUST_SAY=1: the
# survivors must have printed the timeout message.
fail_run() {
  local name=$1 must=$2
  shift 2
  run_timed "$name" env COMM_CHECK_TIMEOUT=3 "${MPIRUN[@]}" "$@"
  [ "$RC" -ne 124 ] && [ "$RC" -ne 137 -o "$SECS" -lt 59 ] \
    || fail "$name: mpirun still running after 60 s (a hang)
$(cat "$T/$name.out")"
  [ "$RC" -ne 0 ] || fail "$name: exit code 0 with a rank gone
$(cat "$T/$name.out")"
  [ "$SECS" -lt 30 ] || fail "$name: the gang took $SECS s to end (want < 30)"
  if [ "$must" = 1 ]; then
    expect_in "$T/$name.out" "$MSG"
  fi
  expect_not_in "$T/$name.out" "the allreduce returned"
  # A survivor that printed anything about the allreduce printed the clear
  # message, not something else.
  if grep -q "comm_check: rank .*allreduce" "$T/$name.out"; then
    expect_in "$T/$name.out" "$MSG"
  fi
  echo "$name: exit $RC after $SECS s"
}

# Rank 2 sleeps: the others time out, say so and abort the gang.
fail_run hang 1 -np 3 "$CHECK" mpi hang
# Rank 2 is killed; mpirun told not to end the job for it: the survivors'
# timeout is what stops the gang.
fail_run kill-timeout 1 --mca orte_abort_on_non_zero_status 0 -np 3 "$CHECK" mpi die-kill
# The same with mpirun's defaults: mpirun or the timeout, whichever first.
fail_run kill 0 -np 3 "$CHECK" mpi die-kill
fail_run exit 0 -np 3 "$CHECK" mpi die-exit

pass

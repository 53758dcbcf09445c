# Gangs started by srun, on a real (private, one-node) Slurm cluster:
# each rank takes its rank from Slurm, writes its own log and reports to
# dagrun; a failing rank ends the step and the retry runs the gang again;
# a timeout cancels the step and leaves no rank behind.
. "$(dirname "$0")/lib.sh"

start_slurm
HOST=$(hostname -s)

# --- Two ranks on the node named in hosts: environment from Slurm, logs
# per rank, the outputs of rank 0.
cat > s.yaml <<Y
dag: s
tasks:
  env:
    stage: exec
    world_size: 2
    launcher: srun
    hosts: [$HOST]
    with:
      command: [sh, -c, 'echo "hello from rank \$DAGRUN_RANK"; echo "\$DAGRUN_RANK \$DAGRUN_WORLD_SIZE \$DAGRUN_LOCAL_RANK \$SLURM_JOB_NAME \$SLURM_STEP_NUM_TASKS \$SLURMD_NODENAME" > $T/env-\$DAGRUN_RANK; echo "\$DAGRUN_GANG_ADDR" > $T/envaddr-\$DAGRUN_RANK']
  ro:
    stage: rank_output
    world_size: 2
    launcher: srun
  addr:
    stage: exec
    world_size: 2
    launcher: srun
    with:
      command: [sh, -c, 'echo "\$DAGRUN_GANG_ADDR" > $T/addr-\$DAGRUN_RANK']
Y
run_dagrun check s.yaml
expect_rc 0
run_dagrun run s.yaml --plain
expect_rc 0
R=$(run_dir s)
for r in 0 1; do
  [ "$(cat "$T/env-$r")" = "$r 2 $r dagrun-env 2 $HOST" ] \
    || fail "rank $r environment: $(cat "$T/env-$r" 2>/dev/null)"
  expect_in "$R/env/attempt-1/rank-$r/log" "hello from rank $r"
done
expect_not_in "$R/env/attempt-1/log" "hello from rank 1"
# The rendezvous: loopback when hosts names only this machine; without
# hosts srun may use any node, so every interface, reached by this
# machine's name.
for r in 0 1; do
  grep -qx "127\.0\.0\.1:[0-9]*" "$T/envaddr-$r" || fail "rank $r of env joined at: $(cat "$T/envaddr-$r")"
  grep -qx "$(hostname):[0-9]*" "$T/addr-$r" || fail "rank $r of addr joined at: $(cat "$T/addr-$r")"
done

[ "$(task_field "$R" ro outputs)" = "{'rank': '0'}" ] || fail "ro outputs: $(task_field "$R" ro outputs)"
/usr/bin/python3 - "$R/run.json" <<'P' || fail "run.json ranks"
import json, sys
t = [t for t in json.load(open(sys.argv[1]))["tasks"] if t["name"] == "env"][0]
assert t["world_size"] == 2, t
assert [(r["rank"], r["exit_code"]) for r in t["ranks"]] == [(0, 0), (1, 0)], t["ranks"]
P
# Slurm ran it: the job is in the controller's records under its name.
scontrol show job 2>/dev/null | grep -q "JobName=dagrun-env" || fail "no Slurm job dagrun-env: $(scontrol show job 2>&1)"

# --- A node that is not in the cluster: srun refuses, the task fails
# and says why.
cat > nn.yaml <<Y
dag: nn
tasks:
  gang: {stage: exec, world_size: 2, launcher: srun, hosts: [no-such-node], with: {command: ["true"]}}
Y
run_dagrun run nn.yaml --plain
expect_rc 1
R=$(run_dir nn)
expect_in "$R/gang/attempt-1/log" "srun: error: Unable to allocate resources: Invalid node name specified"
expect_in "$T/out" "never connected to dagrun"

# --- Rank 1 exits 3 while rank 0 sleeps: --kill-on-bad-exit ends the
# step within seconds, and the retry runs both ranks again.
expect_gang_stops_and_retries srun

# --- A timeout cancels the step: no rank survives, even one that
# ignores SIGTERM, and Slurm has no step or job left running.
write_term_ignorer stubborn.sh
cat > to.yaml <<Y
dag: to
tasks:
  gang:
    stage: exec
    world_size: 2
    launcher: srun
    timeout: 2s
    kill_grace: 2s
    with:
      command: [sh, -c, 'exec sh $T/stubborn.sh $T/to-\$DAGRUN_RANK']
Y
run_dagrun run to.yaml --plain
expect_rc 1
expect_in "$T/out" "timed out after 2.0s; stopped ranks 0, 1"
all_gone "$T/to-0" "$T/to-1"
for _ in $(seq 50); do [ -z "$(squeue -h)" ] && break; sleep 0.2; done
[ -z "$(squeue -h)" ] || fail "Slurm still runs: [$(squeue -h 2>&1)] $(squeue -a 2>&1)"

# --- dagrun killed by SIGKILL mid-gang: the ranks see their connections
# close and stop, and srun's step ends with them.
wrap_launcher srun
cat > k9.yaml <<Y
dag: k9
tasks:
  gang: {stage: hang, world_size: 2, launcher: srun}
Y
expect_no_rank_outlives kill9 k9.yaml
for _ in $(seq 100); do [ -z "$(squeue -h)" ] && break; sleep 0.2; done
[ -z "$(squeue -h)" ] || fail "Slurm still runs: [$(squeue -h 2>&1)] $(squeue -a 2>&1)"
# Ctrl-C twice: every rank killed at once, and srun, given SIGTERM, ends
# its job within 10 s (SIGKILLed outright, it left the job running for
# over a minute).
expect_no_rank_outlives force k9.yaml
t0=$(date +%s.%N)
for _ in $(seq 50); do [ -z "$(squeue -h)" ] && break; sleep 0.2; done
echo "force: squeue empty after $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }') s"
[ -z "$(squeue -h)" ] || fail "Slurm still runs: [$(squeue -h 2>&1)] $(squeue -a 2>&1)"

# --- The train stage in a gang under srun: MPI ranks bootstrap through
# Slurm's PMIx (SLURM_MPI_TYPE, as a cluster's MpiDefault would say), and
# train as the same gang does under mpirun: the same losses, step by step.
# Open MPI's own allocations are not ours (the sanitizer build).
export LSAN_OPTIONS="suppressions=$DAGRUN_SOURCE_DIR/tests/lsan-mpi-zero.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export ASAN_OPTIONS="fast_unwind_on_malloc=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
DATA=$(make_token_data srun 320)
for l in mpirun srun; do
  cat > t$l.yaml <<Y
dag: t$l
tasks:
  train:
    stage: train
    world_size: 2
    launcher: $l
    cache: false
    env: {SLURM_MPI_TYPE: pmix, OMP_NUM_THREADS: "1", OPENBLAS_NUM_THREADS: "1", LSAN_OPTIONS: "$LSAN_OPTIONS", ASAN_OPTIONS: "$ASAN_OPTIONS"}
    with: {data: "$DATA", n_layer: 1, n_head: 2, n_embd: 16, block_size: 16, threads: 1, steps: 4, lr: 0.003, warmup: 1, eval_every: 0, samples: 0, spike_policy: none, batch_size: 2, zero_stage: 1}
Y
  run_dagrun run t$l.yaml --plain
  expect_rc 0
  R=$(run_dir t$l)
  expect_in "$R/train/attempt-1/log" "ZeRO stage 1: global batch 2 x 2 = 4 sequences"
  /usr/bin/python3 - "$R/train/metrics.jsonl" > $l.losses <<'P'
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m["name"] == "loss":
        print(m["step"], repr(m["value"]))
P
  [ "$(wc -l < $l.losses)" -eq 4 ] || fail "$l losses: $(cat $l.losses)"
done
cmp -s mpirun.losses srun.losses || fail "losses under srun differ from mpirun's:
$(paste mpirun.losses srun.losses)"

# --- examples/multinode/train-gang.yaml as its README says to run it, cut
# down to this one-node cluster (2 ranks, gpt-tiny, 3 steps): it checks,
# runs under srun, and leaves a sharded checkpoint and the final model.
sed -e 's/world_size: 8/world_size: 2/' -e 's/model: gpt-small/model: gpt-tiny/' \
    -e 's/steps: 5000/steps: 3/' -e 's/checkpoint_every: 200/checkpoint_every: 2/' \
    -e 's/eval_every: 250/eval_every: 0/' \
    "$DAGRUN_SOURCE_DIR/examples/multinode/train-gang.yaml" > train-gang.yaml
grep -q "world_size: 2" train-gang.yaml && grep -q "steps: 3" train-gang.yaml \
  || fail "the example changed: this test's edits no longer apply"
SLURM_MPI_TYPE=pmix DAGRUN_TOKENS="$DATA" run_dagrun run train-gang.yaml --plain
expect_rc 0
R=$(run_dir train-multinode)
expect_in "$R/train/attempt-1/log" "ZeRO stage 2: global batch 2 x 8 = 16 sequences"
[ -f "$R/train/attempt-1/rank-1/log" ] || fail "no log of rank 1"
ls "$R"/train/checkpoints/step-*/manifest.json >/dev/null 2>&1 || fail "no sharded checkpoint in $R/train/checkpoints"
ls -d "$R"/train/model/step-* >/dev/null 2>&1 || fail "no final model in $R/train/model"

stop_slurm
pass

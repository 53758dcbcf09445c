# Trigger rules (Airflow's): each rule runs its task, or settles it
# skipped or upstream_failed without running, as a user sees it in run.json,
# `dagrun status` and the store, and by which commands ran (marker files).
# one_failed and one_success start before every upstream ended; skips go
# down a chain of all_success tasks and stop at none_failed; a run of
# successes and skips is a success (exit 0).
. "$(dirname "$0")/lib.sh"
export DAGRUN_HOME="$T/home"
mkdir ran

# ok succeeds, bad fails, skp is skipped (one_failed, and nothing failed).
# slow waits for the marker of early_of and early_os: both must start while
# slow still runs, or slow gives up after 10 s and fails.
cat > tr.yaml <<Y
dag: tr
max_parallel: 8
tasks:
  ok:   {stage: exec, with: {command: [touch, $T/ran/ok]}}
  bad:  {stage: exec, with: {command: [sh, -c, 'touch $T/ran/bad; exit 3']}}
  skp:  {stage: exec, needs: [ok], trigger: one_failed, with: {command: [touch, $T/ran/skp]}}
  slow:
    stage: exec
    with: {command: [sh, -c, 'for i in \$(seq 200); do [ -f $T/ran/early_of ] && [ -f $T/ran/early_os ] && exit 0; sleep 0.05; done; exit 1']}
  early_of: {stage: exec, needs: [bad, slow], trigger: one_failed, with: {command: [touch, $T/ran/early_of]}}
  early_os: {stage: exec, needs: [ok, slow], trigger: one_success, with: {command: [touch, $T/ran/early_os]}}
  os_uf:    {stage: exec, needs: [bad], trigger: one_success, with: {command: [touch, $T/ran/os_uf]}}
  os_skip:  {stage: exec, needs: [skp], trigger: one_success, with: {command: [touch, $T/ran/os_skip]}}
  nf_run:   {stage: exec, needs: [ok, skp], trigger: none_failed, with: {command: [touch, $T/ran/nf_run]}}
  nf_uf:    {stage: exec, needs: [ok, bad], trigger: none_failed, with: {command: [touch, $T/ran/nf_uf]}}
  nfmos_run:  {stage: exec, needs: [ok, skp], trigger: none_failed_min_one_success, with: {command: [touch, $T/ran/nfmos_run]}}
  nfmos_skip: {stage: exec, needs: [skp], trigger: none_failed_min_one_success, with: {command: [touch, $T/ran/nfmos_skip]}}
  af_run:   {stage: exec, needs: [bad], trigger: all_failed, with: {command: [touch, $T/ran/af_run]}}
  af_skip:  {stage: exec, needs: [ok, bad], trigger: all_failed, with: {command: [touch, $T/ran/af_skip]}}
  as_run:   {stage: exec, needs: [skp], trigger: all_skipped, with: {command: [touch, $T/ran/as_run]}}
  as_skip:  {stage: exec, needs: [ok, skp], trigger: all_skipped, with: {command: [touch, $T/ran/as_skip]}}
  ns_run:   {stage: exec, needs: [ok, bad], trigger: none_skipped, with: {command: [touch, $T/ran/ns_run]}}
  ns_skip:  {stage: exec, needs: [ok, skp], trigger: none_skipped, with: {command: [touch, $T/ran/ns_skip]}}
  chain1:   {stage: exec, needs: [skp], with: {command: [touch, $T/ran/chain1]}}
  chain2:   {stage: exec, needs: [chain1], with: {command: [touch, $T/ran/chain2]}}
  join:     {stage: exec, needs: [chain2], trigger: none_failed, with: {command: [touch, $T/ran/join]}}
  done:     {stage: exec, needs: [ok, bad, skp], trigger: all_done, with: {command: [touch, $T/ran/done]}}
Y
run_dagrun check tr.yaml
expect_rc 0
run_dagrun run tr.yaml
expect_rc 1
R=$(run_dir tr)
ID=$(basename "$R")
ran="ok bad slow early_of early_os nf_run nfmos_run af_run as_run ns_run join done"
for t in $ran; do
  [ -f "ran/$t" ] || [ "$t" = slow ] || fail "$t did not run"
done
for t in skp os_uf os_skip nf_uf nfmos_skip af_skip as_skip ns_skip chain1 chain2; do
  [ -f "ran/$t" ] && fail "$t ran"
done
# What run.json and `dagrun status --json` say of each task, and why.
run_dagrun status "$ID" --json
expect_rc 0
"$PY" - "$R/run.json" "$T/out" <<'P' || fail "states: $(cat "$R/run.json")"
import json, sys
run = json.load(open(sys.argv[1]))
st = json.load(open(sys.argv[2]))
assert run["state"] == "failed", run["state"]
want = {
    "ok": ("success", None), "bad": ("failed", None), "slow": ("success", None),
    "skp": ("skipped", "trigger one_failed: no upstream task failed"),
    "early_of": ("success", None), "early_os": ("success", None),
    "os_uf": ("upstream_failed", "trigger one_success: no upstream task succeeded"),
    "os_skip": ("skipped", "trigger one_success: every upstream task was skipped"),
    "nf_run": ("success", None),
    "nf_uf": ("upstream_failed", "trigger none_failed: upstream task 'bad' failed"),
    "nfmos_run": ("success", None),
    "nfmos_skip": ("skipped", "trigger none_failed_min_one_success: every upstream task was skipped"),
    "af_run": ("success", None),
    "af_skip": ("skipped", "trigger all_failed: upstream task 'ok' succeeded"),
    "as_run": ("success", None),
    "as_skip": ("skipped", "trigger all_skipped: upstream task 'ok' succeeded"),
    "ns_run": ("success", None),
    "ns_skip": ("skipped", "trigger none_skipped: upstream task 'skp' was skipped"),
    "chain1": ("skipped", "upstream task 'skp' was skipped"),
    "chain2": ("skipped", "upstream task 'chain1' was skipped"),
    "join": ("success", None), "done": ("success", None),
}
for src in (run["tasks"], st["tasks"]):
    got = {t["name"]: (t["state"], t.get("reason") or t.get("error")) for t in src}
    for name, (state, reason) in want.items():
        assert got[name][0] == state, (name, got[name])
        if reason:
            assert got[name][1] == reason, (name, got[name])
# Skipped tasks never started: no attempts.
tasks = {t["name"]: t for t in run["tasks"]}
assert tasks["skp"]["attempts"] == 0 and "started" not in tasks["skp"]
P
# The table of `dagrun status` and the run's summary line show skipped.
run_dagrun status "$ID"
expect_in "$T/out" "chain1"
grep -E '^chain1 +skipped ' "$T/out" >/dev/null || fail "status: $(cat "$T/out")"
[ -d "$R/skp" ] && fail "skipped task skp has a directory"

# Successes and skips only: the run succeeds, dagrun exits 0, and the
# report says how many were skipped.
cat > ok.yaml <<Y
dag: okrun
tasks:
  a:    {stage: exec, with: {command: ["true"]}}
  b:    {stage: exec, needs: [a], trigger: all_failed, with: {command: [touch, $T/ran/ok_b]}}
  c:    {stage: exec, needs: [b], with: {command: [touch, $T/ran/ok_c]}}
Y
run_dagrun run ok.yaml
expect_rc 0
R2=$(run_dir okrun)
[ "$(task_field "$R2" b state)" = skipped ] || fail "b: $(task_field "$R2" b state)"
[ "$(task_field "$R2" c state)" = skipped ] || fail "c: $(task_field "$R2" c state)"
[ -f ran/ok_b ] && fail "b ran"
"$PY" -c 'import json,sys; assert json.load(open(sys.argv[1]))["state"] == "success"' "$R2/run.json" || fail "okrun not a success"
expect_in "$T/out" "1 succeeded, 2 skipped"
expect_in "$R2/report.html" "3, 1 succeeded, 2 skipped"
expect_in "$R2/report.html" 'data-state="skipped"'

# An unknown rule: dagrun check names it at file:line:col with the rules.
sed 's/trigger: all_failed/trigger: all_faild/' ok.yaml > bad.yaml
run_dagrun check bad.yaml
expect_rc 2
expect_in "$T/err" "bad.yaml:4:44: error: 'trigger' in task 'b': unknown trigger rule \"all_faild\" (did you mean 'all_failed'?); the rules are: all_success, all_done, one_failed, one_success, none_failed, none_failed_min_one_success, all_failed, all_skipped, none_skipped"
pass

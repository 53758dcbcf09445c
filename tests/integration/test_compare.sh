# `dagrun compare` and GET /api/compare: two runs of one DAG at two
# learning rates, side by side: the param that differs (and, with --all,
# the one that does not), each task's metrics with the final and the best
# value (lowest for a loss, highest for an accuracy) and its step, and the
# outputs that differ; the same comparison from the API; bad requests
# refused (one run, an unknown run, a path trick, too many runs).
. "$(dirname "$0")/lib.sh"
export DAGRUN_HOME="$T/home"
mkdir -p dags
# train: a loss that falls to its lowest at step 4 and rises again at
# step 5 (so final and best differ), scaled by lr; eval: an accuracy.
cat > dags/sweep.yaml <<'Y'
dag: sweep
params:
  lr: 0.1
  steps: 5
tasks:
  train:
    stage: exec
    cache: false
    outputs: [val_loss]
    with:
      command:
        - sh
        - -c
        - |
          for s in 1 2 3 4 5; do
            l=$(awk -v s=$s -v lr=$1 'BEGIN { v = (s == 5) ? 3 : 5 - s; print v * lr }')
            echo "{\"step\": $s, \"loss\": $l}" >> "$DAGRUN_METRICS"
          done
          echo "{\"val_loss\": $(awk -v lr=$1 'BEGIN { print 2 * lr }')}" > "$DAGRUN_OUTPUTS"
        - train
        - ${params.lr}
  eval:
    stage: exec
    needs: [train]
    cache: false
    with:
      command:
        - sh
        - -c
        - 'printf "{\"step\": 1, \"accuracy\": 0.5, \"mix_accounts\": 2, \"tokens_per_s\": 90}\n{\"step\": 2, \"accuracy\": 0.75}\n{\"step\": 3, \"accuracy\": 0.625}\n" >> "$DAGRUN_METRICS"'
Y
run_dagrun run dags/sweep.yaml -p lr=0.1 --plain
expect_rc 0
run_dagrun run dags/sweep.yaml -p lr=0.3 --plain
expect_rc 0
run_dagrun runs --json
ids=$("$PY" -c 'import json,sys; print(" ".join(r["id"] for r in reversed(json.load(open(sys.argv[1])))))' "$T/out")
set -- $ids
A=$1 B=$2
[ -n "$A" ] && [ -n "$B" ] || fail "two runs expected: $(cat "$T/out")"

# --- the CLI's table ------------------------------------------------------------
run_dagrun compare "$A" "$B"
expect_rc 0
grep -Eq '^  lr +0\.1 +0\.3 *$' "$T/out" || fail "lr row: $(cat "$T/out")"
expect_not_in "$T/out" "steps"
# loss at lr 0.1: 0.4 0.3 0.2 0.1 0.3 -> final 0.3, best 0.1 at step 4
grep -Eq '^  train\.loss \(lower\) +0\.3 \(0\.1 @4\) +0\.9 \(0\.3 @4\) *$' "$T/out" ||
  fail "loss row: $(cat "$T/out")"
# accuracy 0.5 0.75 0.625: the best is the highest
grep -Eq '^  eval\.accuracy \(higher\) +0\.625 \(0\.75 @2\) +0\.625 \(0\.75 @2\) *$' "$T/out" ||
  fail "accuracy row: $(cat "$T/out")"
grep -Eq '^  train\.val_loss +0\.2 +0\.6 *$' "$T/out" || fail "outputs row: $(cat "$T/out")"
run_dagrun compare "$A" "$B" --all
expect_rc 0
grep -Eq '^  steps +5 +5 *$' "$T/out" || fail "--all shows the same param: $(cat "$T/out")"
# A prefix of a run id serves, as for status.
run_dagrun compare "${A%?}" "$B" --json
expect_rc 0
cp "$T/out" cli.json
"$PY" - cli.json "$A" "$B" <<'P' || fail "compare --json: $(cat cli.json)"
import json, sys
c = json.load(open(sys.argv[1]))
assert [r["id"] for r in c["runs"]] == sys.argv[2:4], c["runs"]
p = {r["name"]: r for r in c["params"]}
assert p["lr"]["values"] == [0.1, 0.3] and not p["lr"]["same"], p
assert p["steps"]["same"], p
m = {(r["task"], r["name"]): r for r in c["metrics"]}
loss = m[("train", "loss")]
assert loss["better"] == "lower"
assert [round(v["final"], 9) for v in loss["values"]] == [0.3, 0.9], loss
assert [v["best_step"] for v in loss["values"]] == [4, 4], loss
assert [v["points"] for v in loss["values"]] == [5, 5], loss
acc = m[("eval", "accuracy")]
assert acc["better"] == "higher" and acc["values"][0]["best"] == 0.75, acc
# judged by whole words: a rate is higher-better, "accounts" is no accuracy
assert m[("eval", "tokens_per_s")]["better"] == "higher", m
assert m[("eval", "mix_accounts")]["better"] == "lower", m
o = {(r["task"], r["name"]): r for r in c["outputs"]}
assert o[("train", "val_loss")]["values"] == ["0.2", "0.6"], o
P

# --- bad usage ------------------------------------------------------------------
run_dagrun compare "$A"
expect_rc 2
expect_in "$T/err" "compare needs two runs or more"
run_dagrun compare "$A" nosuchrun
expect_rc 2
expect_in "$T/err" "no run 'nosuchrun'"
run_dagrun compare $(for i in $(seq 17); do echo "$A"; done)
expect_rc 2
expect_in "$T/err" "at most 16 runs"
run_dagrun compare "$A" "$B" --colour
expect_rc 2

# --- the API --------------------------------------------------------------------
echo "read-token-0123456789" > rtoken
chmod 600 rtoken
serve_start --no-cron --read-token-file rtoken
get() { api GET "$1" "" "${2:-read-token-0123456789}"; }
out=$(get "/api/compare?runs=$A,$B")
[ "${out%% *}" = 200 ] || fail "GET /api/compare: $out"
echo "${out#* }" > api.json
"$PY" - api.json cli.json <<'P' || fail "the API's comparison differs from the CLI's"
import json, sys
assert json.load(open(sys.argv[1])) == json.load(open(sys.argv[2]))
P
out=$(get "/api/compare?runs=$A,$B" wrong-token)
[ "${out%% *}" = 401 ] || [ "${out%% *}" = 403 ] || fail "compare without the read token: $out"
out=$(get "/api/compare?runs=$A")
[ "${out%% *}" = 400 ] || fail "one run: $out"
out=$(get "/api/compare")
[ "${out%% *}" = 400 ] || fail "no runs: $out"
out=$(get "/api/compare?runs=$A,nosuchrun")
[ "${out%% *}" = 404 ] || fail "unknown run: $out"
out=$(get "/api/compare?runs=$A,..%2F..%2Fetc")
[ "${out%% *}" = 400 ] || fail "path trick: $out"
many=$(for i in $(seq 17); do printf '%s,' "$A"; done)
out=$(get "/api/compare?runs=${many%,}")
[ "${out%% *}" = 400 ] || fail "17 runs: $out"
expect_in serve.log "listening"
serve_stop
pass

# `dagrun generate` on a model the train stage just made: the text starts
# with the prompt and goes on, a seed gives the same bytes again and
# another seed other ones, greedy is deterministic without a seed; the
# context is the prompt's tokens (<|endoftext|> first only with --bos); a
# checkpoint, a directory of checkpoints and a missing tokenizer are
# handled, bad paths and options are refused. And train's init_from: a
# run that starts from the first one's weights starts at its loss, not at
# ln(vocab); resume of its own checkpoint comes first; another vocabulary
# is refused naming both sizes.
. "$(dirname "$0")/lib.sh"

DATA=$(make_token_data g 320)
MODEL='n_layer: 2, n_head: 2, n_embd: 32, block_size: 32, batch_size: 4, threads: 1'

train_dag() { # NAME DATA EXTRA_PARAMS
  cat > "$1.yaml" <<Y
dag: $1
tasks:
  train: {stage: train, with: {data: "$2", $MODEL, $3}}
Y
}

train_dag first "$DATA" "steps: 200, lr: 0.003, eval_every: 0, checkpoint_every: 100, samples: 1"
run_dagrun run first.yaml --plain
expect_rc 0
R=$(run_dir first)
CK="$R/train/checkpoints"
ls "$CK/step-00000100" "$CK/step-00000200" >/dev/null || fail "checkpoints: $(ls "$CK")"

# gen NAME ARGS...: dagrun generate into NAME.out / NAME.err, RC set.
gen() {
  local name=$1
  shift
  set +e
  "$DAGRUN" generate "$@" >"$name.out" 2>"$name.err"
  RC=$?
  set -e
}
expect_gen_ok() { # NAME
  [ "$RC" -eq 0 ] || fail "generate $1 exited $RC: $(cat "$1.err")"
}

# The directory of checkpoints: its latest one, the prompt, then more.
gen a "$CK" --prompt "the cat" --tokens 30 --seed 7 --no-stop
expect_gen_ok a
/usr/bin/python3 - a.out <<'P' || fail "output: $(cat a.out)"
import sys
out = open(sys.argv[1], "rb").read()
assert out.startswith(b"the cat"), out
assert out.endswith(b"\n"), out
assert len(out.strip()) > len(b"the cat") + 10, out
P
expect_in a.err "step 200"
expect_in a.err "seed 7"
expect_in a.err "tokens/s"
expect_in a.err "$CK/step-00000200"

# Same seed: the same bytes. Another seed: other ones.
gen b "$CK" --prompt "the cat" --tokens 30 --seed 7 --no-stop
expect_gen_ok b
cmp a.out b.out || fail "same seed, different text: $(cat a.out) / $(cat b.out)"
gen c "$CK" --prompt "the cat" --tokens 30 --seed=8 --no-stop
expect_gen_ok c
if cmp -s a.out c.out; then fail "seeds 7 and 8 gave the same text: $(cat a.out)"; fi

# No seed: a random one, printed.
gen r "$CK" --tokens 5
expect_gen_ok r
grep -qE "seed [0-9]+ " r.err || fail "no seed printed: $(cat r.err)"

# Greedy needs no seed to be the same.
gen g1 "$CK/step-00000100" --prompt "a dog" --temperature 0 --tokens 20
expect_gen_ok g1
gen g2 "$CK/step-00000100" --prompt "a dog" --temperature 0 --tokens 20
expect_gen_ok g2
cmp g1.out g2.out || fail "greedy differs: $(cat g1.out) / $(cat g2.out)"
expect_in g1.err "step 100"
expect_in g1.out "a dog"

# The checkpoint names its tokenizer; when that file is gone, the message
# says to pass --tokenizer, and --tokenizer works.
TOKJSON=$(/usr/bin/python3 -c '
import json, sys
m = json.load(open(sys.argv[1] + "/manifest.json"))
print(sys.argv[1] + "/" + m["tokenizer"]["path"])' "$DATA")
[ -f "$TOKJSON" ] || fail "no tokenizer at $TOKJSON"
mv "$TOKJSON" "$T/moved-tokenizer.json"
gen nt "$CK" --tokens 5 --seed 1
mv "$T/moved-tokenizer.json" "$TOKJSON.moved"
[ "$RC" -eq 1 ] || fail "no tokenizer: exit $RC: $(cat nt.err)"
expect_in nt.err "--tokenizer"
gen wt "$CK" --tokens 5 --seed 1 --tokenizer "$TOKJSON.moved"
expect_gen_ok wt
mv "$TOKJSON.moved" "$TOKJSON"

# The context is the prompt's own tokens, as Hugging Face's GPT-2
# tokenizer gives them (the export says add_bos_token: false): no
# <|endoftext|> first, unless --bos asks for it; an empty prompt starts
# with it. --ids shows the context's ids and the drawn ones.
gen ids "$CK" --prompt "the cat sat" --temperature 0 --tokens 8 --ids
expect_gen_ok ids
gen bos "$CK" --prompt "the cat sat" --temperature 0 --tokens 8 --ids --bos
expect_gen_ok bos
gen empty "$CK" --temperature 0 --tokens 4 --ids
expect_gen_ok empty
/usr/bin/python3 - "$TOKJSON" ids.err bos.err empty.err <<'P' || fail "context ids: $(grep ids: ids.err bos.err empty.err)"
import json, sys
tok = json.load(open(sys.argv[1]))
eot = {t["content"]: t["id"] for t in tok["added_tokens"]}["<|endoftext|>"]
vocab = {i: s for s, i in tok["model"]["vocab"].items()}
# GPT-2's byte-level alphabet keeps printable ASCII and writes a space as
# U+0120: enough for this prompt.
def text(ids):
    return "".join(vocab[i] for i in ids).replace("\u0120", " ")
def ids(path):
    line = [l for l in open(path) if l.startswith("dagrun generate: ids:")][0]
    ctx, drawn = line.split(":", 2)[2].split("|")
    return [int(x) for x in ctx.split()], [int(x) for x in drawn.split()]
ctx, drawn = ids(sys.argv[2])
assert ctx and ctx[0] != eot and eot not in ctx, (ctx, eot)
assert text(ctx) == "the cat sat", (ctx, text(ctx))
assert len(drawn) <= 8, drawn
bctx, _ = ids(sys.argv[3])
assert bctx == [eot] + ctx, (bctx, ctx)
ectx, _ = ids(sys.argv[4])
assert ectx == [eot], ectx
print("context ids:", ctx, "with --bos:", bctx, "empty prompt:", ectx)
P

# Paths that are no model: exit 1 naming the path. Bad usage: exit 2.
gen nx /nonexistent/model
[ "$RC" -eq 1 ] || fail "nonexistent: exit $RC"
expect_in nx.err "/nonexistent/model"
mkdir -p "$T/not-a-model" && echo hi > "$T/not-a-model/readme.txt"
gen nm "$T/not-a-model"
[ "$RC" -eq 1 ] || fail "not a model: exit $RC"
expect_in nm.err "$T/not-a-model"
gen bo "$CK" --bogus
[ "$RC" -eq 2 ] || fail "bad option: exit $RC"
expect_in bo.err "--bogus"
gen bt "$CK" --tokens many
[ "$RC" -eq 2 ] || fail "bad --tokens: exit $RC"
gen bT "$CK" --temperature -1
[ "$RC" -eq 2 ] || fail "bad --temperature: exit $RC"
gen nd --prompt hi
[ "$RC" -eq 2 ] || fail "no model dir: exit $RC"
gen h --help
[ "$RC" -eq 0 ] || fail "--help: exit $RC"
expect_in h.out "--temperature"

# dagrun without its dagrun-generate beside it says what is missing.
mkdir -p "$T/lonely/bin" && cp "$DAGRUN" "$T/lonely/bin/dagrun"
set +e
"$T/lonely/bin/dagrun" generate "$CK" >lonely.out 2>lonely.err
RC=$?
set -e
[ "$RC" -ne 0 ] || fail "dagrun generate without dagrun-generate succeeded"
expect_in lonely.err "dagrun-generate"

# init_from: starts from the first model's weights (its shape, whatever
# the params say), so its loss at initialization is near the first run's
# final loss, far below ln(vocab).
# (n_layer differs from the model's: a shape the init_from model wins over.)
MODEL=${MODEL/n_layer: 2,/n_layer: 3,} train_dag tune "$DATA" "steps: 20, lr: 0.001, samples: 0, init_from: \"$CK\""
run_dagrun run tune.yaml --plain
expect_rc 0
R2=$(run_dir tune)
expect_in "$R2/train/attempt-1/log" "init_from $CK/step-00000200"
expect_in "$R2/train/attempt-1/log" "params are ignored"
expect_in "$R2/train/attempt-1/log" "loss at initialization"
/usr/bin/python3 - "$R/train/out/summary.json" "$R2/train/out/summary.json" <<'P' || fail "init_from did not start from the model: $(cat "$R2/train/out/summary.json")"
import json, sys
first = json.load(open(sys.argv[1]))
tune = json.load(open(sys.argv[2]))
assert tune["init_loss"] < first["ln_vocab"] - 1.5, (tune, first)
assert tune["init_loss"] < first["loss"] + 0.5, (tune, first)
assert tune["parameters"] == first["parameters"], (tune, first)
P
grep -q "model init_from: 2 layers" "$R2/train/attempt-1/log" || fail "shape: $(grep 'model ' "$R2/train/attempt-1/log")"

# Its attempt again in the same task directory: resume finds the task's
# own checkpoint, which comes before init_from.
set +e
"$DAGRUN" __worker "$R2/train/attempt-1/attempt.json" 3>again.msgs >again.log 2>&1
rc=$?
set -e
[ "$rc" -eq 0 ] || fail "re-run attempt failed ($rc): $(cat again.log)"
expect_in again.log "resumed from $R2/train/checkpoints/step-00000020"
expect_in again.log "comes before init_from"

# Another vocabulary: refused, naming both sizes.
DATA2=$(make_token_data v 290)
V2=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1] + "/manifest.json"))["tokenizer"]["vocab_size"])' "$DATA2")
train_dag othervocab "$DATA2" "steps: 5, samples: 0, init_from: \"$CK\""
run_dagrun run othervocab.yaml --plain
expect_rc 1
expect_in "$T/out" "vocabulary of 320 tokens"
expect_in "$T/out" "has $V2"
pass

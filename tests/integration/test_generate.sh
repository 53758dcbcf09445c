# `dagrun generate` on a model the train stage just made: the text starts
# with the prompt and goes on, a seed gives the same bytes again and
# another seed other ones, greedy is deterministic without a seed; the
# context is the prompt's tokens (<|endoftext|> first only with --bos); a
# checkpoint, a directory of checkpoints (a corrupt newest one skipped
# with a warning) and a missing tokenizer are handled, bad paths and
# options are refused. And train's init_from: a
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

train_dag first "$DATA" "steps: 200, lr: 0.003, eval_every: 0, checkpoint_every: 100, samples: 1, top_p: 0.9, repetition_penalty: 1.2, stop: [\"(\"]"
run_dagrun run first.yaml --plain
expect_rc 0
R=$(run_dir first)
# The train stage's samples use the sampling params, and say so.
expect_in "$R/train/out/samples.txt" 'top_p 0.9, repetition_penalty 1.2, stop ["("], seed'
grep -v '^=== sample' "$R/train/out/samples.txt" > sample-text.txt
expect_not_in sample-text.txt "("
CK="$R/train/checkpoints"
ls "$CK/step-00000100" "$CK/step-00000200" >/dev/null || fail "checkpoints: $(ls "$CK")"

# gen NAME ARGS...: dagrun generate into NAME.out / NAME.err, RC set.
gen() { run_to "$1" "$DAGRUN" generate "${@:2}"; }
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

# Top-p, repetition penalty and stop strings. Their "off" values draw
# exactly what the sampler drew before they existed: the same bytes.
gen off "$CK" --prompt "the cat" --tokens 30 --seed 7 --no-stop --top-p 1 --repetition-penalty 1
expect_gen_ok off
cmp a.out off.out || fail "top_p 1, penalty 1 changed the text: $(cat a.out) / $(cat off.out)"
# With them on: a seed gives the same text again, another seed another.
for n in p1 p2 p3; do
  s=7; [ $n = p3 ] && s=9
  gen $n "$CK" --prompt "the cat" --tokens 30 --seed $s --no-stop --top-p 0.8 --repetition-penalty 1.3 --temperature 1
  expect_gen_ok $n
done
cmp p1.out p2.out || fail "top-p: same seed, different text: $(cat p1.out) / $(cat p2.out)"
if cmp -s p1.out p3.out; then fail "top-p: seeds 7 and 9 gave the same text: $(cat p1.out)"; fi
# A nucleus too small for a second id is the greedy text.
gen tp "$CK" --prompt "a dog" --tokens 20 --seed 3 --temperature 1 --top-p 0.001
expect_gen_ok tp
gen gr "$CK" --prompt "a dog" --tokens 20 --temperature 0
expect_gen_ok gr
cmp tp.out gr.out || fail "top-p 0.001 is not greedy: $(cat tp.out) / $(cat gr.out)"
# The penalty: greedy text on this corpus repeats its few words; with a
# strong penalty far fewer drawn ids are ones already in the context.
gen rp0 "$CK" --prompt "the cat" --tokens 24 --temperature 0 --no-stop --ids
expect_gen_ok rp0
gen rp5 "$CK" --prompt "the cat" --tokens 24 --temperature 0 --no-stop --ids --repetition-penalty 5
expect_gen_ok rp5
"$PY" - rp0.err rp5.err <<'P' || fail "repetition penalty: $(grep ids: rp0.err rp5.err)"
import sys
def repeats(path):
    line = [l for l in open(path) if l.startswith("dagrun generate: ids:")][0]
    ctx, drawn = line.split(":", 2)[2].split("|")
    seen, n = set(int(x) for x in ctx.split()), 0
    for x in (int(x) for x in drawn.split()):
        n += x in seen
        seen.add(x)
    return n
r0, r5 = repeats(sys.argv[1]), repeats(sys.argv[2])
print("repeated ids drawn: penalty 1:", r0, "penalty 5:", r5)
assert r0 >= 12 and r5 <= r0 // 2, (r0, r5)
P
# --stop: the text is the one without it, cut before the first place its
# generated part holds the stop string (the prompt is not searched: it
# holds "the" too).
"$PY" - a.out <<'P' >stop.txt || fail "no stop string to pick in: $(cat a.out)"
import sys
gen = open(sys.argv[1], "rb").read()[len(b"the cat"):].rstrip(b"\n")
print(gen[8:11].decode("latin-1"))
P
STOP=$(cat stop.txt)
gen st "$CK" --prompt "the cat" --tokens 30 --seed 7 --no-stop --stop "$STOP" --stop "never in the text"
expect_gen_ok st
"$PY" - a.out st.out "$STOP" <<'P' || fail "--stop '$STOP': $(cat st.out) (without: $(cat a.out))"
import sys
full = open(sys.argv[1], "rb").read()
cut = open(sys.argv[2], "rb").read()
stop = sys.argv[3].encode()
n = len(b"the cat")
want = full[:n] + full[n:].split(stop)[0] + b"\n"
assert cut == want, (cut, want)
assert len(cut) < len(full)
P
# Bad values: exit 2, naming the option.
for bad in "--top-p 0" "--top-p 1.5" "--top-p=-1" "--top-p x" "--repetition-penalty 0" "--repetition-penalty -1" "--stop="; do
  # shellcheck disable=SC2086
  gen bad "$CK" --tokens 3 $bad
  [ "$RC" -eq 2 ] || fail "$bad: exit $RC: $(cat bad.err)"
  case $bad in
    --top-p\ x) expect_in bad.err "--top-p needs a number" ;;
    --top-p*) expect_in bad.err "top_p must be above 0 and at most 1" ;;
    --rep*) expect_in bad.err "repetition_penalty must be a number above 0" ;;
    *) expect_in bad.err "stop string 1 is empty" ;;
  esac
done
# And in a stage's params: the task fails naming the param.
train_dag badp "$DATA" "steps: 1, top_p: 1.5"
run_dagrun run badp.yaml --plain
[ "$RC" -ne 0 ] || fail "train with top_p 1.5 succeeded"
expect_in "$T/out" "top_p must be above 0 and at most 1"

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

# A corrupt newest checkpoint in a directory of checkpoints: the one
# before it is used, with a warning that names the skipped one and why.
{ read -r BAD; read -r PREV; } < <(corrupt_newest "$CK" "$T/cdir")
gen skip "$T/cdir" --tokens 3
[ "$RC" -eq 0 ] || fail "generate with a corrupt newest checkpoint: exit $RC: $(cat skip.err)"
expect_in skip.err "warning: skipped the newest checkpoint $BAD, which does not verify (model.safetensors: sha256 mismatch"
expect_in skip.err "using $PREV instead"

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

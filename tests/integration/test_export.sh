# The export stage on a model trained here: the Hugging Face directory it
# writes is read by an independent reader (tests/reference/check_export.py:
# names, shapes, dtypes, values equal to the checkpoint's, or rounded to
# nearest even in bfloat16; configs; tokenizer files), its weights give
# PyTorch's GPT-2 the logits our engine computes (relative error < 1e-4),
# its tokenizer.json encodes text as Hugging Face's tokenizers.js does;
# format dagrun is a checkpoint train resumes from; and what must be
# refused is (another vocabulary, a tokenizer without <|endoftext|>, an HF
# source as format dagrun, NaN weights, bad params), leaving no
# half-written export; and a dir that holds anything but an earlier
# export is refused and left as it was.
# Where transformers is installed, tests/reference/hf_check.py also loads
# the exports with from_pretrained.
. "$(dirname "$0")/lib.sh"

REF="$DAGRUN_SOURCE_DIR/tests/reference"
BIN="$DAGRUN_BUILD_DIR/bin"
NM="${DAGRUN_NPM_DIR:?}/node_modules"
for b in model_logits bpe_tool; do
  [ -x "$BIN/$b" ] || fail "no $BIN/$b (build the $b target)"
done
[ -d "$NM/@huggingface/tokenizers" ] || fail "no @huggingface/tokenizers in $NM (run scripts/setup.sh --tests)"
command -v node >/dev/null || fail "node is needed for the tokenizer reference"

DATA=$(make_token_data t 320)
MODEL='n_layer: 2, n_head: 2, n_embd: 32, block_size: 32, batch_size: 4, threads: 1'
cat > export.yaml <<Y
dag: export
tasks:
  train: {stage: train, with: {data: "$DATA", $MODEL, steps: 50, lr: 0.003, eval_every: 0, checkpoint_every: 25, samples: 0}}
  fp32: {stage: export, needs: [train], with: {model: "\${tasks.train.outputs.checkpoints}", name: tiny-test}}
  bf16: {stage: export, needs: [train], with: {model: "\${tasks.train.outputs.checkpoints}", dtype: bfloat16}}
  ckpt: {stage: export, needs: [train], with: {model: "\${tasks.train.outputs.checkpoints}", format: dagrun}}
  again: {stage: export, needs: [fp32], with: {model: "\${tasks.fp32.outputs.dir}"}}
Y
run_dagrun run export.yaml --plain
expect_rc 0
R=$(run_dir export)
CK="$R/train/checkpoints/step-00000050"
TOK="$DATA/tokenizer.json"
[ -d "$CK" ] || fail "no final checkpoint: $(ls "$R/train/checkpoints")"
E32="$R/fp32/out/model"
E16="$R/bf16/out/model"
ED="$R/ckpt/out/model"
/usr/bin/python3 - "$R" <<'P' || fail "outputs: $(cat "$R"/*/outputs.json)"
import json, sys
r = sys.argv[1]
for task, fmt in [("fp32", "safetensors"), ("bf16", "safetensors"), ("ckpt", "dagrun")]:
    o = json.load(open("%s/%s/outputs.json" % (r, task)))
    d = "%s/%s/out/model" % (r, task)
    assert o == {"dir": d, "format": fmt, "model": d + "/model.safetensors"}, o
P

# The files, by an independent reader.
/usr/bin/python3 "$REF/check_export.py" files "$E32" "$CK" float32 "$TOK" >check32.log 2>&1 ||
  fail "fp32 export: $(cat check32.log)"
/usr/bin/python3 "$REF/check_export.py" files "$E16" "$CK" bfloat16 "$TOK" >check16.log 2>&1 ||
  fail "bf16 export: $(cat check16.log)"
expect_in "$E32/README.md" "# tiny-test"
expect_in "$E32/README.md" "step 50"
expect_in "$E32/README.md" "$CK"
# Re-exported from the Hugging Face export: the same weights.
cmp "$E32/model.safetensors" "$R/again/out/model/model.safetensors" ||
  fail "exporting the export changed its weights"
cmp "$E32/config.json" "$R/again/out/model/config.json" || fail "exporting the export changed config.json"

# Logits: our engine on the checkpoint against PyTorch's GPT-2 on the
# exported tensors, for a prompt's ids.
printf 'the cat eats the fish. a dog trains on every epoch. our team writes the logs.' > prompt.txt
"$BIN/bpe_tool" encode "$E32/tokenizer.json" prompt.txt > prompt.ids || fail "encoding the prompt failed"
[ "$(wc -w < prompt.ids)" -ge 8 ] || fail "prompt too short: $(cat prompt.ids)"
/usr/bin/python3 -c 'import sys; v = open(sys.argv[1]).read().split()[:32]; open(sys.argv[1], "w").write(" ".join(v) + "\n")' prompt.ids
"$BIN/model_logits" "$CK" prompt.ids ours.bin > ours.txt || fail "model_logits on the checkpoint failed"
expect_in ours.txt "kind checkpoint step 50"
/usr/bin/python3 "$REF/check_export.py" logits "$E32" prompt.ids ours.bin >logits32.log 2>&1 ||
  fail "fp32 logits: $(cat logits32.log)"
cat logits32.log
# The bf16 export, opened by modeldir as a Hugging Face directory, gives
# PyTorch's logits on the same bf16 weights.
"$BIN/model_logits" "$E16" prompt.ids ours16.bin > ours16.txt || fail "model_logits on the bf16 export failed"
expect_in ours16.txt "kind hf step -1"
expect_in ours16.txt "tokenizer $E16/tokenizer.json"
/usr/bin/python3 "$REF/check_export.py" logits "$E16" prompt.ids ours16.bin >logits16.log 2>&1 ||
  fail "bf16 logits: $(cat logits16.log)"
cat logits16.log
# Hugging Face directories as the Hub publishes models: the fp32 export's
# weights in F16, in one file and in shards with their index
# (model.safetensors.index.json), written by Python (numpy's half). Each
# gives PyTorch's logits on the same F16 weights, and both the same bits.
/usr/bin/python3 - "$E32" f16 f16s <<'P' || fail "writing the F16 directories"
import json, os, shutil, struct, sys
import numpy as np
src, one, sharded = sys.argv[1:4]
raw = open(os.path.join(src, "model.safetensors"), "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
hdr = json.loads(raw[8:8 + n]); hdr.pop("__metadata__", None)
t = {k: np.frombuffer(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], "<f4")
        .reshape(v["shape"]).astype("<f2") for k, v in hdr.items()}
def write(path, names):
    h, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for k in names:
        b = t[k].tobytes()
        h[k] = {"dtype": "F16", "shape": list(t[k].shape), "data_offsets": [off, off + len(b)]}
        off += len(b); blobs.append(b)
    j = json.dumps(h).encode(); j += b" " * (-len(j) % 8)
    open(path, "wb").write(struct.pack("<Q", len(j)) + j + b"".join(blobs))
for d in (one, sharded):
    os.makedirs(d)
    for f in os.listdir(src):
        if f != "model.safetensors":
            shutil.copy(os.path.join(src, f), d)
write(os.path.join(one, "model.safetensors"), list(t))
names = list(t)
parts = [names[:len(names) // 2], names[len(names) // 2:]]
wmap = {}
for i, part in enumerate(parts):
    f = "model-%05d-of-00002.safetensors" % (i + 1)
    write(os.path.join(sharded, f), part)
    wmap.update({k: f for k in part})
json.dump({"metadata": {"total_size": 0}, "weight_map": wmap},
          open(os.path.join(sharded, "model.safetensors.index.json"), "w"))
P
for d in f16 f16s; do
  "$BIN/model_logits" "$d" prompt.ids "ours-$d.bin" > "ours-$d.txt" || fail "model_logits on $d: $(cat "ours-$d.txt")"
  expect_in "ours-$d.txt" "kind hf step -1"
  /usr/bin/python3 "$REF/check_export.py" logits "$d" prompt.ids "ours-$d.bin" >"logits-$d.log" 2>&1 ||
    fail "$d logits: $(cat "logits-$d.log")"
  cat "logits-$d.log"
done
cmp ours-f16.bin ours-f16s.bin || fail "the sharded F16 directory's logits differ from the one file's"
cmp -s ours.bin ours-f16.bin && fail "F16 weights gave the very fp32 logits: not read as F16?"
# A shard the index misplaces, or one that leaves the directory: refused,
# naming the tensor.
/usr/bin/python3 - f16s <<'P'
import json, os, sys
p = os.path.join(sys.argv[1], "model.safetensors.index.json")
j = json.load(open(p)); k = sorted(j["weight_map"])[0]
j["weight_map"][k] = "model-00002-of-00002.safetensors" if j["weight_map"][k].startswith("model-00001") else "model-00001-of-00002.safetensors"
json.dump(j, open(p, "w"))
P
"$BIN/model_logits" f16s prompt.ids bad.bin > bad.txt 2>&1 && fail "a misplaced tensor was taken"
expect_in bad.txt "the index's weight_map puts it in"
sed -i 's|"model-00001-of-00002.safetensors"|"../model-00001-of-00002.safetensors"|' f16s/model.safetensors.index.json
"$BIN/model_logits" f16s prompt.ids bad.bin > bad.txt 2>&1 && fail "a shard outside the directory was taken"
expect_in bad.txt "expected a .safetensors file beside the index"

# format dagrun: the very same model.
"$BIN/model_logits" "$ED" prompt.ids oursd.bin > /dev/null || fail "model_logits on the dagrun export failed"
cmp ours.bin oursd.bin || fail "the dagrun export's logits differ from the checkpoint's"

# The tokenizer: tokenizers.js on the exported tokenizer.json gives our
# ids; GPT-2's vocab.json + merges.txt give them too.
cat "$REF/varied.txt" > text.txt
printf '<|endoftext|>the cat eats the fish.\n' >> text.txt
node "$REF/hf_encode.mjs" "$NM" "$E32/tokenizer.json" text.txt > hf.ids 2> hf.err ||
  fail "tokenizers.js failed: $(cat hf.err)"
"$BIN/bpe_tool" encode-specials "$E32/tokenizer.json" text.txt > our.ids || fail "bpe_tool encode failed"
[ "$(wc -w < our.ids)" -gt 100 ] || fail "too few ids"
cmp -s hf.ids our.ids || fail "tokenizers.js ids differ from ours on the exported tokenizer.json"
"$BIN/bpe_tool" encode "$E32/tokenizer.json" text.txt > a.ids
"$BIN/bpe_tool" encode "$E32/vocab.json,$E32/merges.txt" text.txt > b.ids ||
  fail "bpe_tool cannot read the exported vocab.json + merges.txt"
cmp -s a.ids b.ids || fail "vocab.json + merges.txt encode differently from tokenizer.json"

# format dagrun: the checkpoint's files as they were, checksums good,
# tokenizer.json beside them, and train resumes from it.
/usr/bin/python3 "$REF/check_export.py" manifest "$ED" >man.log 2>&1 || fail "dagrun export: $(cat man.log)"
cmp "$TOK" "$ED/tokenizer.json" || fail "dagrun export: tokenizer.json differs"
for f in model.safetensors optim.bin manifest.json; do
  cmp "$CK/$f" "$ED/$f" || fail "dagrun export: $f differs from the checkpoint's"
done
cat > resume.yaml <<Y
dag: resume
tasks:
  train: {stage: train, with: {data: "$DATA", $MODEL, steps: 60, lr: 0.003, eval_every: 0, samples: 0, resume: "$ED"}}
Y
run_dagrun run resume.yaml --plain
expect_rc 0
expect_in "$(run_dir resume)/train/attempt-1/log" "resumed from $ED at step 50"

# Where transformers is installed: from_pretrained on both exports.
for e in "$E32" "$E16"; do
  /usr/bin/python3 "$REF/hf_check.py" "$e" "$BIN/model_logits" "$BIN/bpe_tool" text.txt >hf.log 2>&1 ||
    fail "hf_check.py on $e: $(cat hf.log)"
  cat hf.log
done

# Refusals. A tokenizer of another vocabulary: both sizes named, and an
# export already in dir stays as it was.
DATA2=$(make_token_data u 300)
V1=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$E32/config.json")
V2=$(/usr/bin/python3 -c 'import json,sys; t=json.load(open(sys.argv[1])); print(max(list(t["model"]["vocab"].values()) + [a["id"] for a in t["added_tokens"]]) + 1)' "$DATA2/tokenizer.json")
[ "$V1" != "$V2" ] || fail "the two vocabularies have the same size $V1"
mkdir -p keep
cp -r "$E32" keep/model
cat > refuse.yaml <<Y
dag: refuse
tasks:
  vocab: {stage: export, with: {model: "$CK", tokenizer: "$DATA2/tokenizer.json"}}
  replace: {stage: export, with: {model: "$CK", tokenizer: "$DATA2/tokenizer.json", dir: "$T/keep/model"}}
  hfdagrun: {stage: export, with: {model: "$E32", format: dagrun}}
  notmodel: {stage: export, with: {model: "$DATA"}}
  dagrunbf16: {stage: export, with: {model: "$CK", format: dagrun, dtype: bfloat16}}
Y
run_dagrun run refuse.yaml --plain
expect_rc 1
RR=$(run_dir refuse)
expect_in "$RR/vocab/attempt-1/log" "has $V2 ids but the model"
expect_in "$RR/vocab/attempt-1/log" "vocabulary of $V1"
[ -z "$(ls -A "$RR/vocab/out")" ] || fail "a refused export left files: $(ls -A "$RR/vocab/out")"
[ "$(ls -A keep)" = model ] || fail "a refused export left files beside dir: $(ls -A keep)"
for f in model.safetensors config.json tokenizer.json; do
  cmp "$E32/$f" "keep/model/$f" || fail "a refused export changed the export already in dir ($f)"
done
expect_in "$RR/hfdagrun/attempt-1/log" "format dagrun"
expect_in "$RR/hfdagrun/attempt-1/log" "Hugging Face"
expect_in "$RR/notmodel/attempt-1/log" "$DATA: not a model directory"
expect_in "$RR/dagrunbf16/attempt-1/log" "dtype bfloat16 is for format safetensors"
for t in vocab replace hfdagrun notmodel; do
  [ "$(task_field "$RR" $t exit_code)" = 1 ] || fail "$t: exit code $(task_field "$RR" $t exit_code)"
done
for t in dagrunbf16; do
  [ "$(task_field "$RR" $t exit_code)" = 2 ] || fail "$t: exit code $(task_field "$RR" $t exit_code)"
done

# A write that fails half-way (the file size limit, as a full disk would):
# the task fails, the temporary directory is gone, and the export already
# in dir is untouched.
cat > full.yaml <<Y
dag: full
tasks:
  full: {stage: export, with: {model: "$CK", dir: "$T/keep/model"}}
Y
set +e
(ulimit -f 100; "$DAGRUN" run full.yaml --plain) >"$T/out" 2>"$T/err"
RC=$?
set -e
expect_rc 1
RF=$(run_dir full)
expect_in "$RF/full/attempt-1/log" "model.safetensors: File too large"
[ "$(ls -A keep)" = model ] || fail "a failed write left files beside dir: $(ls -A keep)"
cmp "$E32/model.safetensors" keep/model/model.safetensors || fail "a failed write changed the export in dir"

# A tokenizer of the same vocabulary trained on other text is refused, of
# a checkpoint (whose manifest records its tokenizer) and of an export
# (whose tokenizer.json is beside it). After the write test above, whose
# file size limit the state store would outgrow with these runs. The
# model's own tokenizer.json in other bytes (another layout and key
# order, as another writer or Hugging Face version has it) is the same
# tokenizer and is taken, of both.
OTHER=$(other_token_data t 320)
/usr/bin/python3 -c 'import json, sys; json.dump(json.load(open(sys.argv[1])), open(sys.argv[2], "w"), indent=2, sort_keys=True)' "$TOK" relaid.json
cmp -s "$TOK" relaid.json && fail "relaid.json has the bytes of $TOK"
cat > othertok.yaml <<Y
dag: othertok
tasks:
  ck: {stage: export, with: {model: "$CK", tokenizer: "$OTHER/tokenizer.json"}}
  hf: {stage: export, with: {model: "$E32", tokenizer: "$OTHER/tokenizer.json"}}
  ckrelaid: {stage: export, with: {model: "$CK", tokenizer: "$T/relaid.json"}}
  hfrelaid: {stage: export, with: {model: "$E32", tokenizer: "$T/relaid.json"}}
Y
run_dagrun run othertok.yaml --plain
expect_rc 1
RO=$(run_dir othertok)
expect_in "$RO/ck/attempt-1/log" "the tokenizer $OTHER/tokenizer.json is not the model $CK's ($TOK): they do not belong together"
expect_in "$RO/hf/attempt-1/log" "the tokenizer $OTHER/tokenizer.json is not the model $E32's ($E32/tokenizer.json)"
for t in ckrelaid hfrelaid; do
  [ "$(task_field "$RO" $t state)" = success ] || fail "$t: $(cat "$RO/$t/attempt-1/log")"
  cmp relaid.json "$RO/$t/out/model/tokenizer.json" || fail "$t: the export's tokenizer.json is not the one given"
done
# But a file at the path a checkpoint records, written over since, is
# not the tokenizer the record names: comparing it would compare the
# wrong one, so the digests decide there.
cp "$TOK" tok.orig
cp relaid.json "$TOK"
cat > rewritten.yaml <<Y
dag: rewritten
tasks:
  ck: {stage: export, with: {model: "$CK", tokenizer: "$T/relaid.json"}}
Y
run_dagrun run rewritten.yaml --no-cache --plain
expect_rc 1
cp tok.orig "$TOK"
expect_in "$(run_dir rewritten)/ck/attempt-1/log" "the tokenizer $T/relaid.json is not the model $CK's ($TOK): they do not belong together"

# A tokenizer without <|endoftext|> (renamed, same size) is refused.
/usr/bin/python3 - "$TOK" noeot.json <<'P'
import json, sys
t = json.load(open(sys.argv[1]))
for a in t["added_tokens"]:
    if a["content"] == "<|endoftext|>":
        a["content"] = "<|end|>"
v = t["model"]["vocab"]
if "<|endoftext|>" in v:
    v["<|end|>"] = v.pop("<|endoftext|>")
json.dump(t, open(sys.argv[2], "w"))
P
# And a successful export over an existing one replaces it whole.
cat > more.yaml <<Y
dag: more
tasks:
  noeot: {stage: export, with: {model: "$CK", tokenizer: "$T/noeot.json"}}
  replace: {stage: export, with: {model: "$CK", dtype: bfloat16, dir: "$T/keep/model"}}
Y
run_dagrun run more.yaml --plain
expect_rc 1
RM=$(run_dir more)
expect_in "$RM/noeot/attempt-1/log" "has no <|endoftext|>"
[ "$(task_field "$RM" replace state)" = success ] || fail "replace: $(cat "$RM/replace/attempt-1/log")"
[ "$(ls -A keep)" = model ] || fail "replacing left files beside dir: $(ls -A keep)"
cmp "$E16/model.safetensors" keep/model/model.safetensors || fail "the replaced export is not the new one"
/usr/bin/python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["torch_dtype"] == "bfloat16"' keep/model/config.json ||
  fail "the replaced export's config.json: $(cat keep/model/config.json)"
# A corrupt newest checkpoint: the one before it is exported, with a
# warning that names the skipped one and why.
{ read -r BAD; read -r PREV; } < <(corrupt_newest "$R/train/checkpoints" "$T/cdir")
cat > skip.yaml <<Y
dag: skip
tasks:
  skip: {stage: export, with: {model: "$T/cdir"}}
Y
run_dagrun run skip.yaml --plain
expect_rc 0
expect_in "$(run_dir skip)/skip/attempt-1/log" "WARN"
expect_in "$(run_dir skip)/skip/attempt-1/log" "skipped the newest checkpoint $BAD, which does not verify (model.safetensors: sha256 mismatch"
expect_in "$(run_dir skip)/skip/attempt-1/log" "using $PREV instead"

# A diverged model (NaN weights, every checksum good) goes out in no
# format: refused naming the tensor, nothing written.
set_weights "$CK" nan-step nan
cat > nan.yaml <<Y
dag: nan
tasks:
  fp32: {stage: export, with: {model: "$T/nan-step"}}
  bf16: {stage: export, with: {model: "$T/nan-step", dtype: bfloat16}}
  ckpt: {stage: export, with: {model: "$T/nan-step", format: dagrun}}
Y
run_dagrun run nan.yaml --plain
expect_rc 1
RN=$(run_dir nan)
for t in fp32 bf16 ckpt; do
  expect_in "$RN/$t/attempt-1/log" 'tensor "wte.weight" holds nan at element 0: the weights are not finite numbers'
  [ -z "$(ls -A "$RN/$t/out")" ] || fail "$t: a refused export left files: $(ls -A "$RN/$t/out")"
done

# dir is replaced only when it holds an earlier export (its
# .dagrun-export.json and the files that lists) or nothing. Anything else
# is refused before anything moves, naming the path and what is in the
# way, and stays as it was: a DAG that exported over its own directory
# lost the project, logs and state store (dir: "$PWD/proj"), and one
# with dir: "../sub" moved its directory aside for good.
mkdir -p proj/sub home user/stuff user/.gone.old user/empty
echo "my notes" > proj/notes
echo mine > user/file
echo mine > user/stuff/a
echo mine > user/.gone.old/a
cp -r keep/model user/extra
echo mine > user/extra/notes
ln -s "$T/keep/model" user/link
# An export of a dagrun from before the marker (an export's files, no
# marker) is replaced (below), but not with anything else in it: a file
# (notes), a subdirectory, a symbolic link for one of its files, or only
# names an export writes without its weights.
legacy() { cp -r "$1" "$2" && rm "$2/.dagrun-export.json"; }
legacy keep/model user/oldextra
echo mine > user/oldextra/notes
legacy keep/model user/oldsub
mkdir user/oldsub/sub
legacy keep/model user/oldlink
rm user/oldlink/vocab.json
ln -s "$T/keep/model/vocab.json" user/oldlink/vocab.json
legacy "$ED" user/oldckpt
echo mine > user/oldckpt/notes
mkdir user/oldcard
CARD=README.md # (a file the export writes, named apart: test_docs takes a path to a .md for a citation)
cp "keep/model/$CARD" keep/model/config.json user/oldcard/
cat > proj/dag.yaml <<Y
dag: proj
tasks:
  self: {stage: export, with: {model: "$CK", dir: "$T/proj"}}
  runs: {stage: export, with: {model: "$CK", dir: "$T/runs"}}
  store: {stage: export, with: {model: "$CK", dir: "$T/home"}}
  file: {stage: export, with: {model: "$CK", dir: "$T/user/file"}}
  stuff: {stage: export, with: {model: "$CK", dir: "$T/user/stuff"}}
  extra: {stage: export, with: {model: "$CK", dir: "$T/user/extra"}}
  gone: {stage: export, with: {model: "$CK", dir: "$T/user/gone"}}
  link: {stage: export, with: {model: "$CK", dir: "$T/user/link"}}
  oldextra: {stage: export, with: {model: "$CK", dir: "$T/user/oldextra"}}
  oldsub: {stage: export, with: {model: "$CK", dir: "$T/user/oldsub"}}
  oldlink: {stage: export, with: {model: "$CK", dir: "$T/user/oldlink"}}
  oldckpt: {stage: export, with: {model: "$CK", dir: "$T/user/oldckpt"}}
  oldcard: {stage: export, with: {model: "$CK", dir: "$T/user/oldcard"}}
Y
cat > proj/sub/dag.yaml <<Y
dag: sub
tasks:
  up: {stage: export, with: {model: "$CK", dir: "../sub"}}
Y
cp proj/sub/dag.yaml sub.yaml
export DAGRUN_HOME="$T/home/state"
cd "$T/proj/sub"
run_dagrun run dag.yaml --plain
expect_rc 1
cd "$T/proj"
run_dagrun run dag.yaml --plain
expect_rc 1
cd "$T"
unset DAGRUN_HOME
RP=$(run_dir proj)
RS=$(run_dir sub)
expect_in "$RP/self/attempt-1/log" "dir $T/proj is the DAG's directory"
expect_in "$RP/runs/attempt-1/log" "dir $T/runs is the runs directory"
expect_in "$RP/store/attempt-1/log" "dir $T/home holds the state store's directory $T/home/state"
expect_in "$RP/file/attempt-1/log" "dir $T/user/file is in the way: a file;"
expect_in "$RP/stuff/attempt-1/log" "dir $T/user/stuff is in the way: a directory that holds a, which no export wrote"
expect_in "$RP/extra/attempt-1/log" "dir $T/user/extra is in the way: a directory that holds notes, which its export did not write"
expect_in "$RP/gone/attempt-1/log" "$T/user/.gone.old is in the way: a directory that holds a"
expect_in "$RP/link/attempt-1/log" "dir $T/user/link is in the way: a symbolic link"
expect_in "$RS/up/attempt-1/log" "dir $T/proj/sub is the DAG's directory"
for t in extra sub ckpt; do
  expect_in "$RP/old$t/attempt-1/log" "dir $T/user/old$t is in the way: a directory that holds $([ $t = sub ] && echo sub || echo notes), which no export wrote"
done
expect_in "$RP/oldlink/attempt-1/log" "dir $T/user/oldlink is in the way: a directory that holds vocab.json, which no export wrote"
expect_in "$RP/oldcard/attempt-1/log" "dir $T/user/oldcard is in the way: a directory without .dagrun-export.json or model.safetensors, which every export has"
for t in self runs store file stuff extra gone link oldextra oldsub oldlink oldckpt oldcard; do
  [ "$(task_field "$RP" $t exit_code)" = 1 ] || fail "$t: exit code $(task_field "$RP" $t exit_code)"
done
[ "$(cat proj/notes)" = "my notes" ] && [ -f proj/dag.yaml ] && cmp sub.yaml proj/sub/dag.yaml ||
  fail "a refused export changed the DAG's directory: $(ls -AR proj)"
[ "$(cat user/file)" = mine ] && [ "$(cat user/stuff/a)" = mine ] &&
  [ "$(cat user/.gone.old/a)" = mine ] && [ "$(cat user/extra/notes)" = mine ] &&
  [ -f "$T/home/state/state.db" ] && [ -L user/link ] ||
  fail "a refused export changed what was in the way: $(ls -AR user home)"
cmp keep/model/model.safetensors user/extra/model.safetensors || fail "a refused export changed user/extra"
for d in oldextra oldsub oldlink; do
  cmp keep/model/model.safetensors user/$d/model.safetensors || fail "a refused export changed user/$d"
done
[ "$(cat user/oldextra/notes)" = mine ] && [ "$(cat user/oldckpt/notes)" = mine ] &&
  [ -d user/oldsub/sub ] && [ -L user/oldlink/vocab.json ] && [ -f "user/oldcard/$CARD" ] ||
  fail "a refused export changed an older export with more in it: $(ls -AR user)"
LEFT=$(ls -d .*.old .*.tmp ./*/.*.old ./*/.*.tmp 2>/dev/null || true)
[ "$LEFT" = ./user/.gone.old ] || fail "a refused export left siblings: $LEFT"
[ ! -e user/gone ] || fail "a refused export wrote user/gone"

# An empty directory is replaced; so is dir when a killed export left the
# previous one at .<name>.old and its own half-written .<name>.tmp: the
# previous one goes back, then the new one replaces it. So is an export
# of a dagrun from before the marker, of either format: a nightly DAG's
# fixed dir failed after the upgrade.
legacy keep/model user/oldhf
legacy "$ED" user/olddagrun
cp -r keep/model user/.prev.old
mkdir user/.prev.tmp
echo '{"format": "dagrun-export", "version": 1}' > user/.prev.tmp/.dagrun-export.json
echo half > user/.prev.tmp/model.safetensors
cat > again.yaml <<Y
dag: again
tasks:
  empty: {stage: export, with: {model: "$CK", dir: "$T/user/empty"}}
  prev: {stage: export, with: {model: "$CK", dir: "$T/user/prev"}}
  oldhf: {stage: export, with: {model: "$CK", dir: "$T/user/oldhf"}}
  olddagrun: {stage: export, with: {model: "$CK", dir: "$T/user/olddagrun"}}
Y
run_dagrun run again.yaml --plain
expect_rc 0
for d in empty prev oldhf olddagrun; do
  cmp "$E32/model.safetensors" "user/$d/model.safetensors" || fail "user/$d is not the new export"
done
[ ! -e user/.prev.old ] && [ ! -e user/.prev.tmp ] || fail "the killed export's siblings stayed: $(ls -A user)"
pass

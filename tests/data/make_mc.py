#!/usr/bin/python3
"""Makes a small multiple-choice task in HellaSwag's JSONL layout from a
text on this machine, for `dagrun eval --choices` and its tests.

    tests/data/make_mc.py [CORPUS] > tests/data/mc-platitudes.jsonl

CORPUS is a fortune(6) file: short texts separated by "%" lines (default
/usr/share/games/fortunes/platitudes, of Debian's fortunes package,
whose files dags/pretrain.yaml trains on by default). Each item is one
fortune: "ctx" is its first words (5 to 10 of them), the right ending is
the next 4 words of that same fortune, and the 3 wrong ones are 4-word
spans taken from 3 other fortunes, at random places; "label" is where
the right one landed. No ending shares a word with its context: a model
that has learnt nothing still prefers tokens it has just seen (its
residual stream carries the context's embeddings, and the head is tied
to them), and a right ending that repeats the context's words would be
picked by an untrained model more often than chance. Nothing is
downloaded, and the output is the same on every run (a fixed seed).

What it measures: a model trained on CORPUS (as tests/integration/
test_eval.sh trains one) has seen each item's right ending after its
context, and the wrong endings elsewhere: telling them apart is recall of
the training text, plus whatever grammar joins a context to its own
continuation. A model that never saw the corpus is at chance (1 in 4).
It is a check that scoring works, not a benchmark of general ability.
"""
import json
import random
import sys

CTX_MIN, CTX_MAX, END_WORDS, ITEMS, SEED = 5, 10, 4, 200, 27


def fortunes(path):
    docs, cur = [], []
    for line in open(path, encoding="utf-8", errors="replace"):
        if line.strip() == "%":
            docs.append(" ".join(" ".join(cur).split()))
            cur = []
        else:
            cur.append(line)
    docs.append(" ".join(" ".join(cur).split()))
    return [d.split() for d in docs if d]


def words_of(ws):
    return {"".join(c for c in w.lower() if c.isalnum()) for w in ws} - {""}


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/games/fortunes/platitudes"
    docs = fortunes(path)
    rng = random.Random(SEED)
    long_enough = [i for i, d in enumerate(docs) if len(d) >= CTX_MIN + END_WORDS]
    spans = [i for i, d in enumerate(docs) if len(d) >= END_WORDS]
    rng.shuffle(long_enough)
    made = 0
    for i in long_enough:
        if made == ITEMS:
            break
        words = docs[i]
        n = rng.randint(CTX_MIN, min(CTX_MAX, len(words) - END_WORDS))
        ctx = words_of(words[:n])
        if ctx & words_of(words[n:n + END_WORDS]):
            continue
        right = " ".join(words[n:n + END_WORDS])
        wrong = []
        while len(wrong) < 3:
            j = rng.choice(spans)
            at = rng.randint(0, len(docs[j]) - END_WORDS)
            w = docs[j][at:at + END_WORDS]
            if j != i and not ctx & words_of(w) and " ".join(w) not in wrong:
                wrong.append(" ".join(w))
        label = rng.randrange(4)
        endings = wrong[:label] + [right] + wrong[label:]
        print(json.dumps({"ctx": " ".join(words[:n]), "endings": endings,
                          "label": label}))
        made += 1


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Tokenizer benchmark: dagrun's shard -> tokenize stages against
sentencepiece (Debian's spm_train / spm_encode, BPE) on the same text.

    scripts/build.sh && /usr/bin/python3 bench/tokenize/run.py

Builds a corpus of at least --mb MB from text this machine has (fortunes,
man pages, /usr/share/doc), one paragraph per line, duplicates removed so
the shard stage keeps every paragraph and both tools see the same bytes.
Then, at the same vocabulary size and thread count:

  train   dagrun's tokenize stage (train_seconds in its manifest) against
          spm_train --model_type=bpe (wall time)
  encode  MB of text per second: dagrun's encode_mb_per_s against
          spm_encode --output_format=id (wall time; spm_encode has one
          thread, so dagrun is also run with threads: 1)
  tokens/byte  compression of each on the whole corpus

and prints each ratio against the issue's targets (encode >= 2x spm_encode,
train no slower than spm_train, compression within 5%). It is a benchmark,
not a test: it always exits 0 unless a tool fails.
"""
import argparse
import glob
import gzip
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def paragraphs_of(text):
    for para in text.replace("\r", "").split("\n\n"):
        yield " ".join(para.split())


def sources():
    """Text files in a fixed order: fortunes, man pages, docs."""
    for p in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if not p.endswith((".dat", ".u8")) and os.path.isfile(p):
            yield p, open(p, "rb").read().decode("utf-8", "replace").replace("\n%\n", "\n\n")
    for pattern in ("/usr/share/man/man*/*.gz", "/usr/share/doc/*/*.gz",
                    "/usr/share/doc/*/copyright", "/usr/share/common-licenses/*"):
        for p in sorted(glob.glob(pattern)):
            try:
                raw = gzip.open(p).read() if p.endswith(".gz") else open(p, "rb").read()
            except OSError:
                continue
            yield p, raw.decode("utf-8", "replace")


def build_corpus(out_dir, mb):
    txt = os.path.join(out_dir, "corpus.txt")
    jsonl = os.path.join(out_dir, "corpus.jsonl")
    want = mb * 1_000_000
    if os.path.exists(txt) and os.path.getsize(txt) >= want:
        return txt, jsonl
    seen, size, nsrc = set(), 0, 0
    with open(txt, "w", encoding="utf-8") as t, open(jsonl, "w", encoding="utf-8") as j:
        for path, text in sources():
            nsrc += 1
            for para in paragraphs_of(text):
                # spm_train skips lines over 4192 bytes; keep what both read.
                if len(para) < 20 or len(para.encode()) > 4000 or para in seen:
                    continue
                seen.add(para)
                t.write(para + "\n")
                j.write(json.dumps({"text": para}, ensure_ascii=False) + "\n")
                size += len(para.encode()) + 1
            if size >= want:
                break
    if size < want:
        sys.exit(f"only {size / 1e6:.1f} MB of distinct text found, {mb} MB wanted")
    print(f"corpus: {size / 1e6:.1f} MB, {len(seen)} paragraphs from {nsrc} files -> {txt}")
    return txt, jsonl


def timed(cmd, **kw):
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, **kw)
    return time.monotonic() - t0


def run_dagrun(dagrun, work, jsonl, vocab, threads, tokenizer=None):
    """Runs shard -> tokenize; returns the tokenize manifest."""
    name = f"tok-t{threads}-{'load' if tokenizer else 'train'}"
    dag = os.path.join(work, name + ".yaml")
    tok_params = {"shards": "${tasks.shard.outputs.dir}", "threads": threads,
                  "vocab_size": vocab}
    if tokenizer:
        tok_params["tokenizer"] = tokenizer
    spec = {
        "dag": name,
        "tasks": {
            "shard": {"stage": "shard",
                      "with": {"input": jsonl, "format": "jsonl", "shards": 8,
                               "val_fraction": 0.0, "threads": threads}},
            "tokenize": {"stage": "tokenize", "needs": ["shard"], "with": tok_params},
        },
    }
    with open(dag, "w") as f:
        json.dump(spec, f)  # JSON is YAML
    runs = os.path.join(work, "runs")
    subprocess.run([dagrun, "run", dag, "-q", "--runs-dir", runs], check=True)
    run_dir = sorted(glob.glob(os.path.join(runs, name, "*")))[-1]
    return json.load(open(os.path.join(run_dir, "tokenize", "out", "manifest.json"))), run_dir


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=50)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--dagrun", default=os.path.join(ROOT, "build/bin/dagrun"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/out/tokenize"))
    a = ap.parse_args()
    for tool in ("spm_train", "spm_encode"):
        if not shutil.which(tool):
            sys.exit(f"{tool} not found: apt-get install sentencepiece")
    os.makedirs(a.out, exist_ok=True)
    txt, jsonl = build_corpus(a.out, a.mb)
    text_bytes = os.path.getsize(txt)
    work = os.path.join(a.out, "work")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)

    # dagrun: train + encode with every thread, then encode again with one.
    man, run_dir = run_dagrun(a.dagrun, work, jsonl, a.vocab, a.threads)
    tok_json = os.path.join(run_dir, "tokenize", "out", "tokenizer.json")
    man1, _ = run_dagrun(a.dagrun, work, jsonl, a.vocab, 1, tokenizer=tok_json)
    ours = {
        "train_s": man["timing"]["train_seconds"],
        "encode_mbps": man1["timing"]["encode_mb_per_s"],
        "encode_mbps_all": man["timing"]["encode_mb_per_s"],
        "tpb": man["totals"]["tokens_per_byte"],
    }

    # sentencepiece, BPE, byte fallback (so that, like byte-level BPE, it
    # never emits <unk>), identity normalization (dagrun does not
    # normalize either).
    prefix = os.path.join(work, "spm")
    train_s = timed(["spm_train", f"--input={txt}", f"--model_prefix={prefix}",
                     f"--vocab_size={a.vocab}", "--model_type=bpe",
                     f"--num_threads={a.threads}", "--byte_fallback=true",
                     "--character_coverage=0.9995",
                     "--normalization_rule_name=identity", "--minloglevel=2"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ids_path = os.path.join(work, "spm.ids")
    with open(txt, "rb") as fin, open(ids_path, "wb") as fout:
        enc_s = timed(["spm_encode", f"--model={prefix}.model", "--output_format=id"],
                      stdin=fin, stdout=fout)
    ntok = 0
    with open(ids_path, "rb") as f:
        for line in f:
            ntok += len(line.split())
    spm = {"train_s": train_s, "encode_mbps": text_bytes / 1e6 / enc_s,
           "tpb": ntok / text_bytes}

    print(f"\nvocab {a.vocab}, {text_bytes / 1e6:.1f} MB, {a.threads} threads for training")
    print(f"{'':28}{'dagrun':>12}{'sentencepiece':>15}{'ratio':>10}")
    r_train = spm["train_s"] / ours["train_s"]
    r_enc = ours["encode_mbps"] / spm["encode_mbps"]
    r_tpb = ours["tpb"] / spm["tpb"]
    print(f"{'train (s)':28}{ours['train_s']:12.2f}{spm['train_s']:15.2f}{r_train:9.2f}x  (spm/dagrun; target >= 1)")
    print(f"{'encode, 1 thread (MB/s)':28}{ours['encode_mbps']:12.2f}{spm['encode_mbps']:15.2f}{r_enc:9.2f}x  (dagrun/spm; target >= 2)")
    print(f"{'encode, %d threads (MB/s)' % a.threads:28}{ours['encode_mbps_all']:12.2f}{'':>15}")
    print(f"{'tokens per byte':28}{ours['tpb']:12.4f}{spm['tpb']:15.4f}{r_tpb:9.3f}   (dagrun/spm; target within 0.95-1.05)")
    met = [("train no slower than spm_train", r_train >= 1),
           ("encode >= 2x spm_encode", r_enc >= 2),
           ("compression within 5%", abs(r_tpb - 1) <= 0.05)]
    for what, ok in met:
        print(f"  {'met' if ok else 'NOT met'}: {what}")


if __name__ == "__main__":
    main()

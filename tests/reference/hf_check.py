#!/usr/bin/python3
"""An exported model loaded by Hugging Face transformers itself.

    hf_check.py EXPORT_DIR MODEL_LOGITS BPE_TOOL TEXT_FILE

  - AutoTokenizer.from_pretrained(EXPORT_DIR) encodes TEXT_FILE to the
    same ids as our tokenizer (BPE_TOOL encode-specials on the export's
    tokenizer.json), and decodes them back to the text;
  - GPT2LMHeadModel.from_pretrained(EXPORT_DIR) loads with no unexpected
    and no missing weights (but the attention masks, which are buffers,
    and the tied lm_head), and its logits for the first block_size ids
    match our engine's (MODEL_LOGITS on EXPORT_DIR) with
    max|ours - ref| / max|ref| < 1e-4 in float32 over the real vocabulary;
  - the generation config it reads has the export's eos/bos ids.

transformers is not installed in CI: then it prints
"skip: transformers not installed" and exits 0. Where it is installed
(e.g. a GPU machine), tests/integration/test_export.sh runs it on the
float32 and bfloat16 exports.
"""
import json
import os
import re
import subprocess
import sys
import tempfile


def fail(msg):
    print("hf_check.py: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def main():
    if len(sys.argv) != 5:
        fail("usage: hf_check.py EXPORT_DIR MODEL_LOGITS BPE_TOOL TEXT_FILE")
    d, model_logits, bpe_tool, text_file = sys.argv[1:]
    try:
        import numpy as np
        import torch
        import transformers
        from transformers import AutoTokenizer, GPT2LMHeadModel
    except ImportError:
        print("skip: transformers not installed")
        return 0
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    with open(text_file, encoding="utf-8") as f:
        text = f.read()

    # The tokenizer.
    tok = AutoTokenizer.from_pretrained(d)
    hf_ids = tok(text)["input_ids"]
    out = subprocess.run([bpe_tool, "encode-specials",
                          os.path.join(d, "tokenizer.json"), text_file],
                         check=True, capture_output=True, text=True).stdout
    our_ids = [int(v) for v in out.split()]
    if hf_ids != our_ids:
        i = next((k for k in range(min(len(hf_ids), len(our_ids)))
                  if hf_ids[k] != our_ids[k]), min(len(hf_ids), len(our_ids)))
        fail("AutoTokenizer ids differ from ours at %d: %s vs %s" %
             (i, hf_ids[i:i + 8], our_ids[i:i + 8]))
    back = tok.decode(hf_ids, clean_up_tokenization_spaces=False)
    if back != text:
        fail("AutoTokenizer decode(encode(text)) differs from the text")
    if tok.eos_token != "<|endoftext|>" or tok.eos_token_id != cfg["eos_token_id"]:
        fail("AutoTokenizer eos %r (%r), config.json eos_token_id %r" %
             (tok.eos_token, tok.eos_token_id, cfg["eos_token_id"]))
    print("tokenizer ok: %d ids equal (transformers %s, %s)" %
          (len(hf_ids), transformers.__version__, type(tok).__name__))

    # The model.
    model, info = GPT2LMHeadModel.from_pretrained(
        d, torch_dtype=torch.float32, output_loading_info=True)
    model.eval()
    buffers = re.compile(r"(transformer\.)?h\.\d+\.attn\.(masked_)?bias$")
    missing = [k for k in info["missing_keys"]
               if not buffers.match(k) and k != "lm_head.weight"]
    if missing or info["unexpected_keys"] or info.get("mismatched_keys"):
        fail("from_pretrained: missing %s, unexpected %s, mismatched %s" %
             (missing, info["unexpected_keys"], info.get("mismatched_keys")))
    if model.generation_config.eos_token_id != cfg["eos_token_id"]:
        fail("generation_config eos_token_id %r" %
             model.generation_config.eos_token_id)
    ids = our_ids[:cfg["n_positions"]]
    if len(ids) < 2:
        fail("the text encodes to too few ids")
    with tempfile.TemporaryDirectory() as tmp:
        ids_path = os.path.join(tmp, "ids.txt")
        ours_path = os.path.join(tmp, "ours.bin")
        with open(ids_path, "w") as f:
            f.write(" ".join(map(str, ids)) + "\n")
        subprocess.run([model_logits, d, ids_path, ours_path], check=True,
                       capture_output=True)
        ours = np.fromfile(ours_path, dtype=np.float32).astype(np.float64)
    V = cfg["vocab_size"]
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0, :, :V].double().numpy()
    if ours.size != ref.size:
        fail("ours has %d logits, transformers %d" % (ours.size, ref.size))
    ours = ours.reshape(ref.shape)
    rel = float(np.max(np.abs(ours - ref)) / np.max(np.abs(ref)))
    print("transformers logits: %d tokens x %d, max|ours-ref|/max|ref| = %.3e"
          % (len(ids), V, rel))
    if not rel < 1e-4:
        fail("logits differ from transformers': relative error %.3e" % rel)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""An exported model checked by code that shares nothing with dagrun's.

    check_export.py files EXPORT_DIR CHECKPOINT_DIR DTYPE SOURCE_TOKENIZER
        The Hugging Face directory the export stage wrote: model.safetensors
        (read here byte by byte: the 8-byte header length, the JSON header,
        the tensors) has exactly GPT-2's tensor names, the shapes config.json
        implies and DTYPE's dtype (float32 | bfloat16), and its values are
        the checkpoint's model.safetensors' (read by the same reader):
        equal for float32, rounded to nearest even for bfloat16.
        config.json, generation_config.json, tokenizer_config.json and
        special_tokens_map.json have GPT-2's fields; tokenizer.json is the
        source's, byte for byte; vocab.json and merges.txt are its vocab
        and merges; README.md names the source.

    check_export.py logits EXPORT_DIR IDS OURS.bin [TOL]
        GPT-2's forward in PyTorch float64 (tests/reference/torch_gpt.py),
        or Llama's (torch_llama.py) for a config.json of model_type llama,
        on the exported tensors, for the ids in IDS, against our engine's
        logits (model_logits' output, (T, V) float32): prints
        max|ours - ref| / max|ref| and exits 1 when it is TOL (1e-4: the
        CPU engine's fp32; the GPU's BF16 passes a larger one) or more.

    check_export.py greedy EXPORT_DIR "CONTEXT | DRAWN"
        The same PyTorch model's greedy continuation of the CONTEXT ids
        (recomputed over the whole sequence at every step, no cache):
        every id of DRAWN (`dagrun generate --temperature 0 --ids`'s) must
        be its argmax.

    check_export.py manifest DIR
        A dagrun checkpoint's manifest.json: every file listed has its size
        and SHA-256 (hashlib).

Only the standard library and numpy (and torch for logits).
"""
import hashlib
import json
import os
import struct
import sys

import numpy as np

EOT = "<|endoftext|>"
DTYPES = {"F32": (np.float32, 4), "BF16": (np.uint16, 2), "F16": (np.float16, 2)}


def fail(msg):
    print("check_export.py: " + msg, file=sys.stderr)
    sys.exit(1)


def read_safetensors(path):
    """-> (metadata, {name: (dtype string, shape tuple, numpy array)});
    BF16 arrays are the raw uint16 bits."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        fail("%s: too short" % path)
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        fail("%s: header length %d beyond the file" % (path, n))
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    data = blob[8 + n:]
    tensors, ranges = {}, []
    for name, t in header.items():
        if t["dtype"] not in DTYPES:
            fail("%s: %s has dtype %s" % (path, name, t["dtype"]))
        np_type, size = DTYPES[t["dtype"]]
        shape = tuple(t["shape"])
        b, e = t["data_offsets"]
        count = int(np.prod(shape)) if shape else 1
        if e - b != count * size or e > len(data):
            fail("%s: %s: offsets [%d, %d] do not hold %s x %s" %
                 (path, name, b, e, t["dtype"], shape))
        ranges.append((b, e))
        arr = np.frombuffer(data[b:e], dtype=np_type).reshape(shape)
        tensors[name] = (t["dtype"], shape, arr)
    # The tensors tile the data section: no gap, no overlap, no tail.
    at = 0
    for b, e in sorted(ranges):
        if b != at:
            fail("%s: data gap or overlap at byte %d" % (path, at))
        at = e
    if at != len(data):
        fail("%s: %d bytes after the last tensor" % (path, len(data) - at))
    return meta, tensors


def to_float(dtype, arr):
    if dtype == "BF16":
        return (arr.astype(np.uint32) << 16).view(np.float32)
    return arr.astype(np.float32)


def read_model_tensors(d):
    """A Hugging Face directory's tensors: model.safetensors, or the shards
    its model.safetensors.index.json maps each tensor to."""
    index = os.path.join(d, "model.safetensors.index.json")
    if not os.path.exists(index):
        return read_safetensors(os.path.join(d, "model.safetensors"))[1]
    tensors = {}
    weight_map = load_json(index)["weight_map"]
    for shard in sorted(set(weight_map.values())):
        _, part = read_safetensors(os.path.join(d, shard))
        for name in part:
            expect(weight_map.get(name) == shard, "%s: %s not mapped to it" % (shard, name))
        tensors.update(part)
    expect(set(tensors) == set(weight_map), "shards hold %s, the map %s" %
           (sorted(tensors), sorted(weight_map)))
    return tensors


def bf16_rne(f32):
    """float32 array -> the uint16 bits of bfloat16, nearest even."""
    u = f32.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def expected_shapes(cfg):
    C, T, V = cfg["n_embd"], cfg["n_positions"], cfg["vocab_size"]
    s = {"wte.weight": (V, C), "wpe.weight": (T, C),
         "ln_f.weight": (C,), "ln_f.bias": (C,)}
    for l in range(cfg["n_layer"]):
        h = "h.%d." % l
        s.update({
            h + "ln_1.weight": (C,), h + "ln_1.bias": (C,),
            h + "attn.c_attn.weight": (C, 3 * C), h + "attn.c_attn.bias": (3 * C,),
            h + "attn.c_proj.weight": (C, C), h + "attn.c_proj.bias": (C,),
            h + "ln_2.weight": (C,), h + "ln_2.bias": (C,),
            h + "mlp.c_fc.weight": (C, 4 * C), h + "mlp.c_fc.bias": (4 * C,),
            h + "mlp.c_proj.weight": (4 * C, C), h + "mlp.c_proj.bias": (C,),
        })
    return s


def load_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def expect(cond, msg):
    if not cond:
        fail(msg)


def check_files(d, ckpt, dtype, src_tok):
    for name in ["model.safetensors", "config.json", "generation_config.json",
                 "tokenizer.json", "tokenizer_config.json",
                 "special_tokens_map.json", "vocab.json", "merges.txt",
                 "README.md"]:
        expect(os.path.isfile(os.path.join(d, name)), "no %s in %s" % (name, d))
    leftovers = [n for n in os.listdir(os.path.dirname(d) or ".")
                 if n.startswith(".") and os.path.basename(d) in n]
    expect(not leftovers, "temporary siblings left: %s" % leftovers)

    state = load_json(os.path.join(ckpt, "manifest.json"))["state"]["model"]
    cfg = load_json(os.path.join(d, "config.json"))
    tok = load_json(src_tok)
    eot = [t["id"] for t in tok["added_tokens"] if t["content"] == EOT]
    expect(len(eot) == 1, "the source tokenizer has no " + EOT)
    eot = eot[0]
    want = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
            "activation_function": "gelu_new", "n_layer": state["n_layer"],
            "n_head": state["n_head"], "n_embd": state["n_embd"],
            "n_positions": state["block_size"], "n_ctx": state["block_size"],
            "vocab_size": state["vocab_size"], "tie_word_embeddings": True,
            "scale_attn_weights": True, "use_cache": True,
            "bos_token_id": eot, "eos_token_id": eot, "resid_pdrop": 0,
            "embd_pdrop": 0, "attn_pdrop": 0, "initializer_range": 0.02,
            "torch_dtype": dtype}
    for k, v in want.items():
        expect(cfg.get(k) == v, "config.json %s = %r, expected %r" %
               (k, cfg.get(k), v))
    expect(abs(cfg["layer_norm_epsilon"] - 1e-5) < 1e-12, "layer_norm_epsilon")
    expect(cfg.get("n_inner") is None, "n_inner")
    for k in ["scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"]:
        expect(cfg.get(k, False) is False, k)

    gen = load_json(os.path.join(d, "generation_config.json"))
    expect(gen.get("bos_token_id") == eot and gen.get("eos_token_id") == eot,
           "generation_config.json bos/eos: %r" % gen)
    expect(gen.get("max_length") == state["block_size"],
           "generation_config.json max_length %r" % gen.get("max_length"))
    expect(gen.get("do_sample") is True and gen.get("temperature", 0) > 0
           and gen.get("top_k", 0) > 0, "generation_config.json sampling: %r" % gen)
    tc = load_json(os.path.join(d, "tokenizer_config.json"))
    for k, v in {"tokenizer_class": "GPT2TokenizerFast",
                 "model_max_length": state["block_size"], "bos_token": EOT,
                 "eos_token": EOT, "unk_token": EOT,
                 "add_prefix_space": False,
                 "clean_up_tokenization_spaces": False}.items():
        expect(tc.get(k) == v, "tokenizer_config.json %s = %r, expected %r" %
               (k, tc.get(k), v))
    sm = load_json(os.path.join(d, "special_tokens_map.json"))
    expect(sm == {"bos_token": EOT, "eos_token": EOT, "unk_token": EOT},
           "special_tokens_map.json: %r" % sm)

    with open(src_tok, "rb") as a, open(os.path.join(d, "tokenizer.json"), "rb") as b:
        expect(a.read() == b.read(), "tokenizer.json differs from " + src_tok)
    vocab = load_json(os.path.join(d, "vocab.json"))
    want_vocab = dict(tok["model"]["vocab"])
    for t in tok["added_tokens"]:
        want_vocab.setdefault(t["content"], t["id"])
    expect(vocab == want_vocab, "vocab.json is not tokenizer.json's vocab")
    expect(len(vocab) == state["vocab_size"],
           "vocab.json has %d ids, the model %d" % (len(vocab), state["vocab_size"]))
    with open(os.path.join(d, "merges.txt"), encoding="utf-8") as f:
        lines = f.read().split("\n")
    expect(lines[0].startswith("#version"), "merges.txt has no #version line")
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    expect(lines[1:] == merges + [""], "merges.txt is not tokenizer.json's merges")
    with open(os.path.join(d, "README.md"), encoding="utf-8") as f:
        card = f.read()
    expect("from_pretrained" in card and "dagrun generate" in card,
           "README.md does not say how to load the model")

    meta, ours = read_safetensors(os.path.join(d, "model.safetensors"))
    expect(meta.get("format") == "pt", "metadata format %r" % meta.get("format"))
    shapes = expected_shapes(cfg)
    expect(set(ours) == set(shapes), "tensor names: extra %s, missing %s" %
           (sorted(set(ours) - set(shapes)), sorted(set(shapes) - set(ours))))
    st_dtype = {"float32": "F32", "bfloat16": "BF16"}[dtype]
    _, src = read_safetensors(os.path.join(ckpt, "model.safetensors"))
    expect(set(src) == set(shapes), "the checkpoint's tensors are not GPT-2's")
    changed = 0
    for name, shape in shapes.items():
        dt, sh, arr = ours[name]
        expect(sh == shape, "%s: shape %s, expected %s" % (name, sh, shape))
        expect(dt == st_dtype, "%s: dtype %s, expected %s" % (name, dt, st_dtype))
        sdt, ssh, sarr = src[name]
        expect(sdt == "F32" and ssh == shape, "checkpoint %s: %s %s" % (name, sdt, ssh))
        if dtype == "float32":
            expect(np.array_equal(arr.view(np.uint32), sarr.view(np.uint32)),
                   "%s: values differ from the checkpoint's" % name)
        else:
            want_bits = bf16_rne(sarr)
            bad = int(np.count_nonzero(arr != want_bits))
            expect(bad == 0, "%s: %d values are not the checkpoint's rounded "
                   "to nearest even bfloat16" % (name, bad))
            changed += int(np.count_nonzero(to_float(dt, arr) != sarr))
    if dtype == "bfloat16":
        expect(changed > 0, "bfloat16 export equals float32: nothing was rounded")
    print("files ok: %d tensors, %s" % (len(shapes), dtype))


def reference(d):
    """The model of Hugging Face directory d in PyTorch float64: a
    function of a list of ids -> their logits (T, V) as numpy."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch
    import torch_llama
    from torch_gpt import forward
    cfg = load_json(os.path.join(d, "config.json"))
    tensors = read_model_tensors(d)
    p = {n: torch.from_numpy(to_float(dt, arr).astype(np.float64))
         for n, (dt, _, arr) in tensors.items()}
    V = cfg["vocab_size"]
    if cfg["model_type"] == "llama":
        # LlamaForCausalLM's config, as torch_llama.py takes it; absent
        # keys have LlamaConfig's defaults.
        H = cfg["num_attention_heads"]
        expect(cfg["architectures"] == ["LlamaForCausalLM"] and
               cfg.get("hidden_act", "silu") == "silu" and
               not cfg.get("attention_bias") and
               not cfg.get("mlp_bias") and
               cfg.get("rope_scaling") is None and
               cfg.get("head_dim", cfg["hidden_size"] // H) * H ==
               cfg["hidden_size"], "config.json: %r" % cfg)
        lc = dict(kv=cfg.get("num_key_value_heads", H),
                  theta=cfg.get("rope_theta", 10000.0),
                  eps=cfg.get("rms_norm_eps", 1e-6),
                  untied=int(not cfg.get("tie_word_embeddings", False)))
        expect(("lm_head.weight" in p) == bool(lc["untied"]),
               "lm_head.weight present: %s, tie_word_embeddings %s" %
               ("lm_head.weight" in p, not lc["untied"]))

        def run(idx):
            return torch_llama.forward(p, idx, None,
                                       cfg["num_hidden_layers"], H, V, lc)[0]
    else:
        def run(idx):
            return forward(p, idx, None, cfg["n_layer"], cfg["n_head"], V)[0]

    def logits(ids):
        with torch.no_grad():
            idx = torch.tensor([ids], dtype=torch.int64)
            return run(idx)[0, :, :V].numpy()
    return logits


def check_logits(d, ids_path, ours_path, tol="1e-4"):
    tol = float(tol)
    with open(ids_path) as f:
        ids = [int(v) for v in f.read().split()]
    ref = reference(d)(ids)
    V = ref.shape[1]
    ours = np.fromfile(ours_path, dtype=np.float32).astype(np.float64)
    expect(ours.size == ref.size, "ours has %d logits, the reference %d" %
           (ours.size, ref.size))
    ours = ours.reshape(ref.shape)
    rel = float(np.max(np.abs(ours - ref)) / np.max(np.abs(ref)))
    print("logits: %d tokens x %d, max|ours-ref|/max|ref| = %.3e" %
          (ref.shape[0], V, rel))
    expect(rel < tol, "logits differ from PyTorch's: relative error %.3e "
           "(tolerance %g)" % (rel, tol))


def check_greedy(d, ids_line):
    """ids_line: `dagrun generate --ids`'s "CONTEXT | DRAWN": every drawn
    id must be the reference's argmax given the context and the ids drawn
    before it (the whole sequence recomputed each step, no cache)."""
    ctx, drawn = [[int(v) for v in part.split()]
                  for part in ids_line.split("|")]
    expect(drawn, "no ids drawn: %r" % ids_line)
    logits = reference(d)
    seq = list(ctx)
    for i, got in enumerate(drawn):
        row = logits(seq)[-1]
        want = int(np.argmax(row))
        expect(got == want, "drawn id %d is %d, PyTorch's greedy choice %d "
               "(logit %.6g against %.6g)" % (i, got, want, row[got],
                                              row[want]))
        seq.append(got)
    print("greedy: %d ids after %d of context, all PyTorch's argmax" %
          (len(drawn), len(ctx)))


def check_manifest(d):
    m = load_json(os.path.join(d, "manifest.json"))
    expect(m.get("format") == "dagrun-checkpoint", "manifest format %r" % m.get("format"))
    for name, f in m["files"].items():
        path = os.path.join(d, name)
        expect(os.path.isfile(path), "%s listed but missing" % name)
        with open(path, "rb") as fp:
            blob = fp.read()
        expect(len(blob) == f["bytes"], "%s: %d bytes, manifest %d" %
               (name, len(blob), f["bytes"]))
        expect(hashlib.sha256(blob).hexdigest() == f["sha256"],
               "%s: sha256 mismatch" % name)
    print("manifest ok: %d files" % len(m["files"]))


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "files" and len(sys.argv) == 6:
        check_files(*sys.argv[2:])
    elif cmd == "logits" and len(sys.argv) in (5, 6):
        check_logits(*sys.argv[2:])
    elif cmd == "greedy" and len(sys.argv) == 4:
        check_greedy(*sys.argv[2:])
    elif cmd == "manifest" and len(sys.argv) == 3:
        check_manifest(sys.argv[2])
    else:
        fail("usage: see the docstring")


if __name__ == "__main__":
    main()

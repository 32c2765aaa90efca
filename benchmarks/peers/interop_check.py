#!/usr/bin/env python3
"""Interop proof for `cleave export`: a Cleave GPT checkpoint, exported to one safetensors file, loads into an
independent PyTorch GPT-2 (written here from the GPT-2 definition, not from Cleave's code) whose logits on a
fixed prompt equal Cleave's own (`cleave generate --logits`) within 1e-4.

Not part of CI (it needs PyTorch and the `safetensors` package from PyPI):

    python3 -m venv venv && venv/bin/pip install torch safetensors numpy
    venv/bin/python benchmarks/peers/interop_check.py --cleave build/bin/cleave --checkpoint RUN/checkpoints

Name mapping checked here (docs/checkpoints.md, "Export"): embed.token [V, D], embed.position [T, D],
blocks.N.{ln1,ln2}.{weight,bias}, blocks.N.attn.qkv.{weight [3D, D], bias} (q | k | v, head h at columns
h*hd.. inside each third), blocks.N.attn.proj.*, blocks.N.mlp.fc.*, blocks.N.mlp.proj.*, final_norm.*,
head.weight (absent when tied: the head is embed.token). Linear weights are [out, in] as in PyTorch.
Exit status 0 when every logit agrees within the tolerance, 1 otherwise.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file


class Block(torch.nn.Module):
    """GPT-2 pre-LN block: x + attn(ln1(x)), then + mlp(ln2(x)); tanh GELU; LayerNorm eps 1e-5."""

    def __init__(self, d, heads, d_ff):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(d, eps=1e-5)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d, eps=1e-5)
        self.fc = torch.nn.Linear(d, d_ff)
        self.fc_proj = torch.nn.Linear(d_ff, d)

    def forward(self, x):
        b, t, d = x.shape
        hd = d // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, hd).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = att.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        d, v, t = m["d_model"], m["vocab_size"], m["seq_len"]
        self.tok = torch.nn.Embedding(v, d)
        self.pos = torch.nn.Embedding(t, d)
        self.blocks = torch.nn.ModuleList(Block(d, m["n_heads"], m.get("d_ff", 4 * d)) for _ in range(m["n_layers"]))
        self.norm = torch.nn.LayerNorm(d, eps=1e-5)
        self.head = torch.nn.Linear(d, v, bias=False)

    def forward(self, ids):
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))

    def load_cleave(self, tensors, tied):
        """Copies Cleave's logical tensors in; every exported tensor must be used and every module filled."""
        mapping = {"embed.token": self.tok.weight, "embed.position": self.pos.weight,
                   "final_norm.weight": self.norm.weight, "final_norm.bias": self.norm.bias}
        for i, blk in enumerate(self.blocks):
            for ours, theirs in (("ln1", blk.ln1), ("ln2", blk.ln2), ("attn.qkv", blk.qkv), ("attn.proj", blk.proj),
                                 ("mlp.fc", blk.fc), ("mlp.proj", blk.fc_proj)):
                mapping[f"blocks.{i}.{ours}.weight"] = theirs.weight
                mapping[f"blocks.{i}.{ours}.bias"] = theirs.bias
        if not tied:
            mapping["head.weight"] = self.head.weight
        unused = sorted(set(tensors) - set(mapping))
        missing = sorted(set(mapping) - set(tensors))
        if unused or missing:
            sys.exit(f"name mapping mismatch: unused {unused}, missing {missing}")
        with torch.no_grad():
            for name, param in mapping.items():
                if tuple(tensors[name].shape) != tuple(param.shape):
                    sys.exit(f"{name}: exported shape {tuple(tensors[name].shape)}, PyTorch {tuple(param.shape)}")
                param.copy_(tensors[name].float())
            if tied:
                self.head.weight.copy_(self.tok.weight)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cleave", default="build/bin/cleave", help="the cleave binary")
    ap.add_argument("--checkpoint", required=True, help="a step_NNNNNNN directory or a checkpoint.dir")
    ap.add_argument("--prompt", default="The pipeline is full; ", help="fixed input (bytes are tokens)")
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"], help="export dtype")
    ap.add_argument("--tolerance", type=float, default=1e-4, help="max |logit difference| allowed")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        exported = os.path.join(tmp, "model.safetensors")
        cleave_logits = os.path.join(tmp, "logits.json")
        subprocess.run([args.cleave, "export", args.checkpoint, "--out", exported, "--dtype", args.dtype], check=True)
        with safe_open(exported, framework="pt") as f:
            meta = f.metadata()
        model_spec = json.loads(meta["model"])
        prompt = args.prompt.encode()[: model_spec["seq_len"]].decode(errors="ignore")  # one context window
        subprocess.run([args.cleave, "generate", args.checkpoint, "--prompt", prompt, "--tokens", "0",
                        "--logits", cleave_logits], check=True, stdout=subprocess.DEVNULL)
        tensors = load_file(exported)
        theirs = json.load(open(cleave_logits))

    torch.manual_seed(0)
    model = GPT(model_spec).eval()
    model.load_cleave(tensors, model_spec.get("tie_embeddings", True))
    ids = torch.tensor([theirs["tokens"]], dtype=torch.long)
    with torch.no_grad():
        ours = model(ids)[0].double()
    cleave = torch.tensor(theirs["logits"], dtype=torch.float64)
    diff = (ours - cleave).abs().max().item()
    scale = cleave.abs().max().item()
    same_argmax = bool((ours.argmax(-1) == cleave.argmax(-1)).all())
    print(f"model {model_spec} (step {meta.get('step')}, export {args.dtype})")
    print(f"prompt {prompt!r}: {ids.shape[1]} positions x {cleave.shape[1]} logits; "
          f"max |PyTorch - Cleave| = {diff:.3e} (logits up to {scale:.2f}); same argmax everywhere: {same_argmax}")
    tolerance = args.tolerance if args.dtype == "f32" else max(args.tolerance, 0.05 * scale)
    ok = diff <= tolerance and (args.dtype == "bf16" or same_argmax)
    print(("PASS" if ok else "FAIL") + f" (tolerance {tolerance:.1e})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

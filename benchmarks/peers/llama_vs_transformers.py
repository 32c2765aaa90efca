#!/usr/bin/env python3
"""model.type llama against transformers' LlamaForCausalLM: a Cleave llama checkpoint, exported to one safetensors
file and loaded into transformers by the fixed name map below, gives Cleave's own logits (`cleave generate
--logits`) within --tolerance (default 1e-4; measured 1.8e-7 on a 2-layer GQA model, rope_theta 500000).

Not part of CI (needs torch, transformers and safetensors, e.g. the /work/venv-peers venv):

    cleave train cfg.json            # a llama config with vocab_size 256 (generate feeds bytes)
    venv/bin/python benchmarks/peers/llama_vs_transformers.py --cleave build/bin/cleave --run RUN_DIR

Name map (docs/models.md): embed.token -> model.embed_tokens.weight, blocks.N.attn_norm.weight ->
model.layers.N.input_layernorm.weight, blocks.N.mlp_norm.weight -> post_attention_layernorm.weight,
blocks.N.attn.{q,k,v,o}.weight -> self_attn.{q,k,v,o}_proj.weight, blocks.N.mlp.{gate,up,down}.weight ->
mlp.{gate,up,down}_proj.weight, final_norm.weight -> model.norm.weight, head.weight -> lm_head.weight (tied:
embed.token). Exit status 0 when every logit agrees within the tolerance, 1 otherwise.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file
from transformers import LlamaConfig, LlamaForCausalLM

PARTS = [("attn_norm.weight", "input_layernorm.weight"), ("mlp_norm.weight", "post_attention_layernorm.weight"),
         ("attn.q.weight", "self_attn.q_proj.weight"), ("attn.k.weight", "self_attn.k_proj.weight"),
         ("attn.v.weight", "self_attn.v_proj.weight"), ("attn.o.weight", "self_attn.o_proj.weight"),
         ("mlp.gate.weight", "mlp.gate_proj.weight"), ("mlp.up.weight", "mlp.up_proj.weight"),
         ("mlp.down.weight", "mlp.down_proj.weight")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cleave", required=True)
    ap.add_argument("--run", required=True, help="a cleave run directory of a llama (config.json, checkpoints/)")
    ap.add_argument("--prompt", default="Hello, world! This is")
    ap.add_argument("--tolerance", type=float, default=1e-4)
    a = ap.parse_args()
    model = json.load(open(os.path.join(a.run, "config.json")))["model"]
    assert model["type"] == "llama", model["type"]
    with tempfile.TemporaryDirectory() as tmp:
        weights, logits = os.path.join(tmp, "m.safetensors"), os.path.join(tmp, "logits.json")
        ckpt = os.path.join(a.run, "checkpoints")
        subprocess.run([a.cleave, "export", ckpt, "--out", weights], check=True, capture_output=True)
        subprocess.run([a.cleave, "generate", ckpt, "--prompt", a.prompt, "--tokens", "1", "--logits", logits],
                       check=True, capture_output=True)
        sd = load_file(weights)
        d = json.load(open(logits))
    layers, tied = model["n_layers"], model["tie_embeddings"]
    cfg = LlamaConfig(vocab_size=model["vocab_size"], hidden_size=model["d_model"],
                      intermediate_size=model["ffn_hidden_size"], num_hidden_layers=layers,
                      num_attention_heads=model["n_heads"], num_key_value_heads=model["n_kv_heads"],
                      max_position_embeddings=model["seq_len"], rope_theta=model["rope_theta"],
                      rms_norm_eps=model["norm_eps"], tie_word_embeddings=tied, attention_bias=False, mlp_bias=False)
    m = LlamaForCausalLM(cfg).float().eval()
    state = {"model.embed_tokens.weight": sd["embed.token"], "model.norm.weight": sd["final_norm.weight"],
             "lm_head.weight": sd["embed.token"] if tied else sd["head.weight"]}
    for i in range(layers):
        for ours, theirs in PARTS:
            state[f"model.layers.{i}.{theirs}"] = sd[f"blocks.{i}.{ours}"]
    m.load_state_dict(state, strict=True)
    with torch.no_grad():
        out = m(torch.tensor([d["tokens"]])).logits[0]
    want = torch.tensor(d["logits"])  # row n-1: the logits after the first n tokens
    diff = (out - want).abs().max().item()
    print(f"{len(d['tokens'])} positions x {want.shape[1]} logits: max |cleave - transformers| = {diff:.3g} "
          f"(logit scale {want.abs().max().item():.3g}, tolerance {a.tolerance})")
    return 0 if diff <= a.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())

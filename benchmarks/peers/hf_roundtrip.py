#!/usr/bin/env python3
"""Proof that Cleave reads and writes Hugging Face checkpoints transformers agrees with (not CI: it needs torch
and transformers, e.g. /work/venv-peers):

1. import: a tiny random GPT2LMHeadModel and LlamaForCausalLM, made offline from a config (seeded, weights
   drawn with initializer_range 0.2 so the logits are not near zero), saved with save_pretrained (safetensors),
   go through `cleave import`; `cleave generate --logits` then equals transformers' logits at every prefix of
   the prompt within --tolerance (fp32).
2. export: a Cleave model trained 10 steps at tp2 x pp2 (mpiexec -n 4 --oversubscribe: 4 ranks on however
   many cores the machine has) goes through `cleave export --format hf` (and a sharded export with
   --max-shard-size); transformers' from_pretrained loads it and gives the logits `cleave generate --logits`
   gives on the checkpoint.

    /work/venv-peers/bin/python benchmarks/peers/hf_roundtrip.py --cleave build/bin/cleave

Llama cases run when the cleave binary knows model.type "llama" (else they are reported as skipped).
Exit status 0 when every case is within the tolerance, 1 otherwise.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
import transformers
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

MPI = ["mpiexec", "-n", "4", "--oversubscribe", "--allow-run-as-root", "--mca", "btl_vader_single_copy_mechanism",
       "none", "--mca", "btl", "self,vader"]


def run(cmd, log):
    """Runs cmd with its output in the file log; returns that output, or ends the script with its tail."""
    with open(log, "w") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        sys.stdout.write(open(log).read()[-3000:])
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return open(log).read()


def cleave_logits(cleave, ckpt, prompt, tmp):
    out = os.path.join(tmp, f"logits_{len(os.listdir(tmp))}.json")
    run([cleave, "generate", ckpt, "--prompt", prompt, "--tokens", "0", "--logits", out], out + ".log")
    d = json.load(open(out))
    return d["tokens"], torch.tensor(d["logits"], dtype=torch.float64)


def hf_logits(model, tokens):
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0].double()


def compare(name, model, cleave, ckpt, prompt, tmp, tolerance):
    tokens, ours = cleave_logits(cleave, ckpt, prompt, tmp)
    theirs = hf_logits(model, tokens)
    diff = (ours - theirs).abs().max().item()
    ok = diff <= tolerance
    print(f"{'PASS' if ok else 'FAIL'} {name}: {len(tokens)} prefixes x {ours.shape[1]} logits, "
          f"max |transformers - cleave| = {diff:.3e} (logits up to {theirs.abs().max().item():.2f})")
    return ok


def tiny_gpt2():
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=300, n_embd=48, n_layer=3, n_head=4, n_positions=32, n_inner=80,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, initializer_range=0.2,
                        bos_token_id=None, eos_token_id=None)
    return GPT2LMHeadModel(config).eval()


def tiny_llama(tied=False):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=300, hidden_size=48, num_hidden_layers=3, num_attention_heads=6,
                         num_key_value_heads=2, intermediate_size=80, max_position_embeddings=32, rms_norm_eps=1e-6,
                         rope_theta=500000.0, tie_word_embeddings=tied, initializer_range=0.2,
                         bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return LlamaForCausalLM(config).eval()


def cleave_knows_llama(cleave, tmp):
    r = subprocess.run([cleave, "train", "--set", "model.type=llama", "--set", "train.steps=0", "--set",
                        f"train.out_dir={tmp}/probe"], capture_output=True, text=True)
    return "model.type" not in (r.stdout + r.stderr) or r.returncode == 0


def trained_model(cleave, tmp, model, name):
    cfg = os.path.join(tmp, f"{name}.json")
    json.dump({"model": model, "parallel": {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2},
               "optimizer": {"lr": 0.03}, "train": {"steps": 10, "eval_batches": 0, "out_dir": os.path.join(tmp, name)}},
              open(cfg, "w"))
    run(MPI + [cleave, "train", cfg], os.path.join(tmp, f"{name}_train.log"))
    return os.path.join(tmp, name, "checkpoints")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cleave", default="build/bin/cleave")
    ap.add_argument("--prompt", default="Pipelines, tensors!")
    ap.add_argument("--tolerance", type=float, default=1e-5)
    args = ap.parse_args()
    cleave = os.path.abspath(args.cleave)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        llama = cleave_knows_llama(cleave, tmp)
        makers = [("GPT2LMHeadModel", tiny_gpt2)]
        if llama:
            makers += [("LlamaForCausalLM", tiny_llama), ("LlamaForCausalLM tied", lambda: tiny_llama(tied=True))]
        for name, make in makers:
            model = make()
            tag = name.replace(" ", "_")
            hf_dir, ckpt = os.path.join(tmp, f"hf_{tag}"), os.path.join(tmp, f"ck_{tag}")
            model.save_pretrained(hf_dir, safe_serialization=True)
            run([cleave, "import", hf_dir, "--out", ckpt], ckpt + ".log")
            ok &= compare(f"import {name}", model, cleave, ckpt, args.prompt, tmp, args.tolerance)

        trained = [("gpt", {"type": "gpt", "vocab_size": 256, "d_model": 32, "n_layers": 4, "n_heads": 4, "seq_len": 32,
                            "tie_embeddings": True})]
        if llama:
            trained.append(("llama", {"type": "llama", "vocab_size": 300, "d_model": 48, "n_layers": 4, "n_heads": 6,
                                      "n_kv_heads": 2, "seq_len": 32, "ffn_hidden_size": 80, "tie_embeddings": False}))
            trained.append(("llama_tied", {"type": "llama", "vocab_size": 256, "d_model": 32, "n_layers": 2,
                                           "n_heads": 4, "n_kv_heads": 2, "seq_len": 32, "ffn_hidden_size": 64,
                                           "rope_theta": 500000.0, "norm_eps": 1e-6, "tie_embeddings": True}))
        for name, model_section in trained:
            ckpt = trained_model(cleave, tmp, model_section, f"trained_{name}")
            for shard in (None, "16KiB"):
                out = os.path.join(tmp, f"export_{name}_{shard}")
                run([cleave, "export", ckpt, "--format", "hf", "--out", out] + (["--max-shard-size", shard] if shard else []),
                    out + ".log")
                model = AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager").eval()
                files = len([f for f in os.listdir(out) if f.endswith(".safetensors")])
                ok &= compare(f"export {name} trained 10 steps at tp2 x pp2 -> {type(model).__name__} ({files} file(s))",
                              model, cleave, ckpt, args.prompt, tmp, args.tolerance)
        if not llama:
            print("SKIP LlamaForCausalLM cases: this cleave build has no model.type llama")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

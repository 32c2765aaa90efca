#!/usr/bin/env python3
"""MistralForCausalLM (a sliding window shorter than the prompt) and Qwen2ForCausalLM (q/k/v biases; and with
use_sliding_window: the window from layer max_window_layers on, as its layer_types) against
transformers, through `cleave import`, `train --init-from` and `export --format hf` (not CI: it needs torch and
transformers, e.g. a venv outside the repository: python3 -m venv /work/venv-ft && /work/venv-ft/bin/pip
install torch transformers safetensors):

1. import: tiny random models made offline from a config (seeded, initializer_range 0.2 so logits are not near
   zero), saved with save_pretrained together with a tokenizer trained here (tokenizers' BPE), go through
   `cleave import`; `cleave generate --logits` equals transformers' logits (eager attention, fp32) at every
   prefix of the prompt within --tolerance.
2. export: the imported checkpoint exported with `cleave export --format hf`: config.json differs from the
   source only in the keys docs/checkpoints.md lists, generation_config.json and the tokenizer files are there,
   AutoTokenizer reads the same ids, from_pretrained gives the source's logits.
3. fine-tune: `train --init-from HF_DIR` at model.seq_len 16 (the models serve 64) for 4 steps at tp2 x pp2
   (mpiexec -n 4 --oversubscribe), exported, loaded by from_pretrained: transformers' logits equal Cleave's on
   the trained checkpoint.

    /work/venv-ft/bin/python benchmarks/peers/families_vs_transformers.py --cleave build/bin/cleave

Tolerance 1e-4 (absolute, on logits of magnitude ~5-10): both sides compute in fp32 but sum in different orders
(OpenBLAS / Cleave's kernels against torch's), so the logits agree to a few ulps of their magnitude times the
depth (measured: at most 8.8e-6); 1e-4 leaves a margin of ~11x and is still far below any real difference (a window off by one position,
a missing bias, a wrong RoPE pair layout each move logits by 1e-2 or more).
Exit status 0 when every case passes, 1 otherwise.
"""
import argparse
import json
import os
import sys
import tempfile

import torch
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import (AutoModelForCausalLM, AutoTokenizer, MistralConfig, MistralForCausalLM,
                          PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_roundtrip import MPI, cleave_logits, compare, run  # noqa: E402

# docs/checkpoints.md: the keys an imported-then-exported config.json may differ in.
LISTED = {"torch_dtype", "dtype"}


def tokenizer(path):
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=280, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["Pipelines, tensors! Sliding windows and biases."] * 20, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(path)
    return fast


def tiny_mistral(window):
    torch.manual_seed(0)
    config = MistralConfig(vocab_size=300, hidden_size=48, num_hidden_layers=3, num_attention_heads=4,
                           num_key_value_heads=2, intermediate_size=80, max_position_embeddings=64, rms_norm_eps=1e-6,
                           rope_theta=10000.0, sliding_window=window, initializer_range=0.2, bos_token_id=1,
                           eos_token_id=2, tie_word_embeddings=False)
    return MistralForCausalLM(config).eval()


def tiny_qwen2(window=None, from_layer=28):
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=300, hidden_size=48, num_hidden_layers=3, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=80, max_position_embeddings=64, rms_norm_eps=1e-6,
                         rope_theta=1000000.0, use_sliding_window=window is not None,
                         sliding_window=window if window is not None else 4096, max_window_layers=from_layer,
                         initializer_range=0.2, bos_token_id=1, eos_token_id=2, tie_word_embeddings=True)
    config._attn_implementation = "eager"
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():  # biases are zero at init: make them count
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0.0, 0.5)
    return model


def config_diff(a, b):
    keys = set(a) | set(b)
    return sorted(k for k in keys if a.get(k, "<absent>") != b.get(k, "<absent>"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cleave", default="build/bin/cleave")
    ap.add_argument("--prompt", default="Sliding windows!")  # 16 tokens: the fine-tuned seq_len
    ap.add_argument("--tolerance", type=float, default=1e-4)
    ap.add_argument("--cases", default="mistral,mistral_null,qwen2,qwen2_window", help="comma-separated subset")
    args = ap.parse_args()
    cleave = os.path.abspath(args.cleave)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for short, name, make in [
                ("mistral", "MistralForCausalLM sliding_window 5", lambda: tiny_mistral(5)),
                ("mistral_null", "MistralForCausalLM sliding_window null", lambda: tiny_mistral(None)),
                ("qwen2", "Qwen2ForCausalLM", tiny_qwen2),
                ("qwen2_window", "Qwen2ForCausalLM use_sliding_window, sliding_window 5 from layer 1",
                 lambda: tiny_qwen2(5, 1))]:
            tag = short
            if short not in args.cases.split(","):
                continue
            model = make()
            src, ckpt, out = (os.path.join(tmp, f"{p}_{tag}") for p in ("hf", "ck", "export"))
            model.save_pretrained(src, safe_serialization=True)
            tok = tokenizer(src)
            log = run([cleave, "import", src, "--out", ckpt], ckpt + ".log")
            print("     " + [l for l in log.splitlines() if "seq_len" in l][0].split("] ", 1)[-1][:150])
            ok &= compare(f"import {name}", model, cleave, ckpt, args.prompt, tmp, args.tolerance)
            if short == "mistral":  # control: the window matters at this prompt length
                cfg = MistralConfig.from_dict(model.config.to_dict())
                cfg.sliding_window = None
                full = MistralForCausalLM(cfg).eval()
                full.load_state_dict(model.state_dict())
                ids = torch.tensor([list(args.prompt.encode())])
                with torch.no_grad():
                    moved = (full(ids).logits - model(ids).logits).abs().max().item()
                print(f"{'PASS' if moved > 100 * args.tolerance else 'FAIL'} control: the same weights without the "
                      f"window give logits {moved:.3g} away (the comparison above sees the window)")
                ok &= moved > 100 * args.tolerance
            if short == "qwen2_window":  # control: the window (layers 1 and 2 only) matters at this prompt length
                cfg = Qwen2Config.from_dict(model.config.to_dict())
                cfg.layer_types = ["full_attention"] * cfg.num_hidden_layers
                cfg._attn_implementation = "eager"
                full = Qwen2ForCausalLM(cfg).eval()
                full.load_state_dict(model.state_dict())
                every = Qwen2Config.from_dict(model.config.to_dict())
                every.layer_types = ["sliding_attention"] * every.num_hidden_layers
                every._attn_implementation = "eager"
                all_windowed = Qwen2ForCausalLM(every).eval()
                all_windowed.load_state_dict(model.state_dict())
                ids = torch.tensor([list(args.prompt.encode())])
                with torch.no_grad():
                    moved = (full(ids).logits - model(ids).logits).abs().max().item()
                    moved_all = (all_windowed(ids).logits - model(ids).logits).abs().max().item()
                print(f"{'PASS' if min(moved, moved_all) > 100 * args.tolerance else 'FAIL'} control: the same weights "
                      f"with no window give logits {moved:.3g} away, with the window in every layer {moved_all:.3g} "
                      f"away (the comparison above sees which layers have it); layer_types "
                      f"{model.config.layer_types}")
                ok &= min(moved, moved_all) > 100 * args.tolerance
            # Export of the imported checkpoint: the source's config, generation config and tokenizer.
            run([cleave, "export", ckpt, "--format", "hf", "--out", out], out + ".log")
            diff = config_diff(json.load(open(os.path.join(src, "config.json"))),
                               json.load(open(os.path.join(out, "config.json"))))
            files_ok = all(os.path.exists(os.path.join(out, f)) for f in
                           ("generation_config.json", "tokenizer.json", "tokenizer_config.json"))
            same_ids = AutoTokenizer.from_pretrained(out)(args.prompt)["input_ids"] == tok(args.prompt)["input_ids"]
            good = set(diff) <= LISTED and files_ok and same_ids
            print(f"{'PASS' if good else 'FAIL'} export {name}: config.json differs from the source in {diff} "
                  f"(listed: {sorted(LISTED)}); generation_config.json and tokenizer files {'there' if files_ok else 'MISSING'}; "
                  f"AutoTokenizer ids {'equal' if same_ids else 'DIFFER'}")
            ok &= good
            back = AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager").eval()
            ok &= compare(f"export {name} -> {type(back).__name__}", back, cleave, ckpt, args.prompt, tmp,
                          args.tolerance)
            # Fine-tune at a shorter context at tp2 x pp2, export, compare.
            run_dir = os.path.join(tmp, f"ft_{tag}")
            run(MPI + [cleave, "train", "--init-from", src, "--set", "model.seq_len=16", "--set", "train.steps=4",
                       "--set", "train.eval_batches=0", "--set", "optimizer.lr=0.01",
                       "--set", "parallel.tensor_model_parallel_size=2", "--set", "parallel.pipeline_model_parallel_size=2",
                       "--set", f"train.out_dir={run_dir}"], run_dir + ".log")
            record = json.load(open(os.path.join(run_dir, "run.json"))).get("init_from", "")
            ft_out = os.path.join(tmp, f"ft_export_{tag}")
            run([cleave, "export", os.path.join(run_dir, "checkpoints"), "--format", "hf", "--out", ft_out], ft_out + ".log")
            tuned = AutoModelForCausalLM.from_pretrained(ft_out, attn_implementation="eager").eval()
            moved = (cleave_logits(cleave, os.path.join(run_dir, "checkpoints"), args.prompt, tmp)[1] -
                     cleave_logits(cleave, ckpt, args.prompt, tmp)[1]).abs().max().item()
            ok &= compare(f"fine-tuned {name} (seq_len 16 of 64, tp2 x pp2, 4 steps; logits moved {moved:.3g}; "
                          f"run.json: {record[-60:]})", tuned, cleave, os.path.join(run_dir, "checkpoints"),
                          args.prompt, tmp, args.tolerance)
            ok &= moved > 1e-3
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

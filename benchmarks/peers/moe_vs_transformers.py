#!/usr/bin/env python3
"""Proof that Cleave's moe family reads and writes the Hugging Face mixtures transformers agrees with (not CI:
it needs torch and transformers, e.g. /work/venv-peers; issue 33 part 4):

1. import: a tiny random MixtralForCausalLM (4 experts, top-2; made offline from a config, seeded, weights drawn
   with initializer_range 0.2 so logits and router scores are spread), saved with save_pretrained (the
   per-expert safetensors names), goes through `cleave import`; `cleave generate --logits` equals transformers'
   logits at every prefix of the prompt within --tolerance.
   The same for a tiny random Qwen3MoeForCausalLM (per-head q/k RMSNorm before rope: model.qk_norm; norm_topk_prob
   false and true) and a dense Qwen3ForCausalLM (model.type llama with qk_norm), with every RMSNorm scale (q_norm and
   k_norm included) drawn around 1 so a missed norm shows; and a tiny random Qwen2MoeForCausalLM (q/k/v biases, a
   shared expert twice the experts' width scaled per token by sigmoid(shared_expert_gate); norm_topk_prob false,
   and true with a tied head), its q/k/v biases drawn N(0, 0.3) (transformers initialises them to 0, where a
   missed bias would not show) and its RMSNorm scales around 1.
2. refusal: a DeepseekV3ForCausalLM (latent attention, grouped routing) is refused by `cleave import` with one
   error naming the architecture.
3. export: Cleave moe models trained 10 steps at tp2 x pp2 (mpiexec -n 4 --oversubscribe) go through
   `cleave export --format hf` (one file and shards); from_pretrained loads a MixtralForCausalLM (no q/k norms) or a
   Qwen3MoeForCausalLM (model.qk_norm true) or a Qwen2MoeForCausalLM (model.qkv_bias, n_shared_experts 2 with
   shared_expert_gate), and a trained llama with qk_norm a Qwen3ForCausalLM, with the logits
   `cleave generate --logits` gives on the checkpoint.

Tolerance 1e-4 (absolute, fp32 logits of magnitude up to ~10): both sides compute in fp32 but sum in different
orders (Cleave groups tokens per expert into one GEMM each and combines the k outputs in slot order,
transformers index_adds expert by expert), so logits differ by float rounding (~1e-6 measured); a routing choice
that rounding could flip (two router probabilities within ~1e-7) would show as a difference far above 1e-4,
so the bound also checks that both sides pick the same experts.

    /work/venv-peers/bin/python benchmarks/peers/moe_vs_transformers.py --cleave build/bin/cleave

Exit status 0 when every case passes, 1 otherwise.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch
import transformers
from transformers import (AutoModelForCausalLM, DeepseekV3Config, DeepseekV3ForCausalLM, MixtralConfig,
                          MixtralForCausalLM, Qwen2MoeConfig, Qwen2MoeForCausalLM, Qwen3Config, Qwen3ForCausalLM,
                          Qwen3MoeConfig, Qwen3MoeForCausalLM)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_roundtrip import compare, run, trained_model  # noqa: E402


def tiny_mixtral(tied=False):
    torch.manual_seed(0)
    config = MixtralConfig(vocab_size=300, hidden_size=48, num_hidden_layers=3, num_attention_heads=6,
                           num_key_value_heads=2, intermediate_size=40, num_local_experts=4, num_experts_per_tok=2,
                           max_position_embeddings=32, rms_norm_eps=1e-5, rope_theta=1e6, tie_word_embeddings=tied,
                           initializer_range=0.2, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return MixtralForCausalLM(config).eval()


def spread_norms(model):
    """Every RMSNorm scale (input / post-attention / final, q_norm, k_norm) drawn 1 + N(0, 0.3)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
    return model


def tiny_qwen3_moe(normalize, tied=False):
    torch.manual_seed(0)
    config = Qwen3MoeConfig(vocab_size=300, hidden_size=48, num_hidden_layers=3, num_attention_heads=6,
                            num_key_value_heads=2, head_dim=8, intermediate_size=64, moe_intermediate_size=40,
                            num_experts=4, num_experts_per_tok=2, norm_topk_prob=normalize, max_position_embeddings=32,
                            rms_norm_eps=1e-6, tie_word_embeddings=tied, initializer_range=0.2, bos_token_id=None,
                            eos_token_id=None, pad_token_id=None)
    return spread_norms(Qwen3MoeForCausalLM(config)).eval()


def tiny_qwen2_moe(normalize, tied=False):
    torch.manual_seed(0)
    config = Qwen2MoeConfig(vocab_size=300, hidden_size=48, num_hidden_layers=3, num_attention_heads=6,
                            num_key_value_heads=2, intermediate_size=64, moe_intermediate_size=40,
                            shared_expert_intermediate_size=80, num_experts=4, num_experts_per_tok=2,
                            norm_topk_prob=normalize, max_position_embeddings=32, rms_norm_eps=1e-6,
                            tie_word_embeddings=tied, initializer_range=0.2, bos_token_id=None, eos_token_id=None,
                            pad_token_id=None)
    model = spread_norms(Qwen2MoeForCausalLM(config))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("_proj.bias"):
                p.copy_(0.3 * torch.randn_like(p))
    return model.eval()


def tiny_deepseek_v3():
    torch.manual_seed(0)
    config = DeepseekV3Config(vocab_size=64, hidden_size=16, intermediate_size=32, moe_intermediate_size=8,
                              num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, n_routed_experts=4,
                              n_shared_experts=1, num_experts_per_tok=2, n_group=1, topk_group=1, kv_lora_rank=8,
                              q_lora_rank=8, qk_rope_head_dim=4, v_head_dim=8, qk_nope_head_dim=4,
                              first_k_dense_replace=1, max_position_embeddings=16)
    return DeepseekV3ForCausalLM(config)


def tiny_qwen3():
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=300, hidden_size=48, num_hidden_layers=3, num_attention_heads=6,
                         num_key_value_heads=2, head_dim=8, intermediate_size=80, max_position_embeddings=32,
                         rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=False, initializer_range=0.2,
                         bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return spread_norms(Qwen3ForCausalLM(config)).eval()


def refused(cleave, tmp, model, name):
    hf_dir = os.path.join(tmp, f"hf_{name}")
    model.save_pretrained(hf_dir, safe_serialization=True)
    r = subprocess.run([cleave, "import", hf_dir, "--out", os.path.join(tmp, f"ck_{name}")], capture_output=True,
                       text=True)
    text = (r.stdout + r.stderr).strip()
    ok = r.returncode != 0 and f"architecture {name} is not supported" in text and \
        not os.path.exists(os.path.join(tmp, f"ck_{name}"))
    print(f"{'PASS' if ok else 'FAIL'} refuse {name}: {text.splitlines()[-1] if text else '(no output)'}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cleave", default="build/bin/cleave")
    ap.add_argument("--prompt", default="Pipelines, tensors!")
    ap.add_argument("--tolerance", type=float, default=1e-4)
    args = ap.parse_args()
    cleave = os.path.abspath(args.cleave)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in [("MixtralForCausalLM", tiny_mixtral),
                           ("MixtralForCausalLM tied", lambda: tiny_mixtral(tied=True)),
                           ("Qwen3MoeForCausalLM", lambda: tiny_qwen3_moe(normalize=False)),
                           ("Qwen3MoeForCausalLM norm_topk_prob tied", lambda: tiny_qwen3_moe(normalize=True, tied=True)),
                           ("Qwen2MoeForCausalLM", lambda: tiny_qwen2_moe(normalize=False)),
                           ("Qwen2MoeForCausalLM norm_topk_prob tied", lambda: tiny_qwen2_moe(normalize=True, tied=True)),
                           ("Qwen3ForCausalLM", tiny_qwen3)]:
            model = make()
            tag = name.replace(" ", "_")
            hf_dir, ckpt = os.path.join(tmp, f"hf_{tag}"), os.path.join(tmp, f"ck_{tag}")
            model.save_pretrained(hf_dir, safe_serialization=True)
            run([cleave, "import", hf_dir, "--out", ckpt], ckpt + ".log")
            ok &= compare(f"import {name}", model, cleave, ckpt, args.prompt, tmp, args.tolerance)

        ok &= refused(cleave, tmp, tiny_deepseek_v3(), "DeepseekV3ForCausalLM")

        trained = [("moe", {"type": "moe", "vocab_size": 300, "d_model": 48, "n_layers": 4, "n_heads": 6,
                            "n_kv_heads": 2, "seq_len": 32, "ffn_hidden_size": 40, "n_experts": 4, "top_k": 2,
                            "rope_theta": 1e6, "norm_eps": 1e-5, "tie_embeddings": False}),
                   ("moe_tied_top1", {"type": "moe", "vocab_size": 256, "d_model": 32, "n_layers": 2, "n_heads": 4,
                                      "n_kv_heads": 2, "seq_len": 32, "ffn_hidden_size": 32, "n_experts": 8,
                                      "top_k": 1, "tie_embeddings": True}),
                   ("moe_qk_norm", {"type": "moe", "vocab_size": 300, "d_model": 48, "n_layers": 4, "n_heads": 6,
                                    "n_kv_heads": 2, "seq_len": 32, "ffn_hidden_size": 40, "n_experts": 4, "top_k": 2,
                                    "qk_norm": True, "normalize_top_k": False, "norm_eps": 1e-6}),
                   ("moe_gated_shared", {"type": "moe", "vocab_size": 300, "d_model": 48, "n_layers": 4, "n_heads": 6,
                                         "n_kv_heads": 2, "seq_len": 32, "ffn_hidden_size": 40, "n_experts": 4,
                                         "top_k": 2, "n_shared_experts": 2, "shared_expert_gate": True,
                                         "qkv_bias": True, "normalize_top_k": False, "norm_eps": 1e-6}),
                   ("llama_qk_norm", {"type": "llama", "vocab_size": 300, "d_model": 48, "n_layers": 4, "n_heads": 6,
                                      "n_kv_heads": 2, "seq_len": 32, "ffn_hidden_size": 80, "qk_norm": True,
                                      "norm_eps": 1e-6})]
        for name, model_section in trained:
            ckpt = trained_model(cleave, tmp, model_section, f"trained_{name}")
            for shard in (None, "16KiB"):
                out = os.path.join(tmp, f"export_{name}_{shard}")
                run([cleave, "export", ckpt, "--format", "hf", "--out", out] +
                    (["--max-shard-size", shard] if shard else []), out + ".log")
                model = AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager").eval()
                files = len([f for f in os.listdir(out) if f.endswith(".safetensors")])
                ok &= compare(f"export {name} trained 10 steps at tp2 x pp2 -> {type(model).__name__} "
                              f"({files} file(s))", model, cleave, ckpt, args.prompt, tmp, args.tolerance)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

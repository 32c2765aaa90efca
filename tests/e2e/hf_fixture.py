#!/usr/bin/env python3
"""Writes a tiny Hugging Face GPT2LMHeadModel (or, with --llama, LlamaForCausalLM with grouped-query attention
and an untied head; --mistral W / --qwen2 its MistralForCausalLM with sliding_window W / Qwen2ForCausalLM with
q/k/v biases variants, --qwen2-window W [--max-window-layers L] its window W from layer L on; --max-positions N
its max_position_embeddings; --tokenizer a Llama 2-style tokenizer.json (byte fallback, six merges; vocab_size 272
then) and tokenizer_config.json; with --mixtral, MixtralForCausalLM: the Llama with E 4 experts, top-2, one tensor
per expert as save_pretrained writes them; with --qwen3 a Qwen3ForCausalLM (Llama with per-head q_norm / k_norm);
with --qwen3moe a Qwen3MoeForCausalLM (Qwen3's attention, mlp.gate and mlp.experts.{j}.{gate,up,down}_proj,
norm_topk_prob false); with --qwen2moe a Qwen2MoeForCausalLM (q/k/v biases, Qwen3-MoE's expert names, a shared
expert mlp.shared_expert.{gate,up,down}_proj of width 2F and its sigmoid gate mlp.shared_expert_gate [1, D])) directory with the standard
library only (no torch, no downloads): config.json as
transformers writes it and seeded random weights (normal, std 0.3: far from a fresh model's) under
transformers' names and shapes (GPT-2's Conv1D weights [in, out]) in model.safetensors, or in --shards files
with model.safetensors.index.json. --drop / --extra / --reshape / --nan NAME make bad inputs (--nan: element 3
of NAME is a NaN).

    hf_fixture.py OUT_DIR [--llama [--mistral W | --qwen2] [--max-positions N] [--tokenizer]] [--mixtral | --qwen3 | --qwen3moe | --qwen2moe] [--shards N] [--seed S] [--drop NAME] [--extra NAME] [--reshape NAME] [--nan NAME]
"""
import argparse
import json
import os
import random
import struct

V, D, LAYERS, HEADS, T, F = 261, 16, 2, 4, 12, 24
KV_HEADS = 2  # llama


EXPERTS, TOP_K = 4, 2  # mixtral
SHARED = 2 * F  # qwen2moe: shared_expert_intermediate_size


def tensors(seed, llama, qkv_bias=False, mixtral=False, qk_norm=False, qwen3moe=False, vocab=V, qwen2moe=False):
    rng = random.Random(seed)
    out = {}

    def add(name, *shape):
        n = 1
        for e in shape:
            n *= e
        scale = 1.0 if "norm.weight" in name or ("ln_" in name and name.endswith(".weight")) else 0.0
        out[name] = (list(shape), [scale + rng.gauss(0.0, 0.3) for _ in range(n)])

    if llama:
        hd = D // HEADS
        add("model.embed_tokens.weight", vocab, D)
        for i in range(LAYERS):
            p = f"model.layers.{i}."
            add(p + "input_layernorm.weight", D)
            add(p + "self_attn.q_proj.weight", HEADS * hd, D)
            add(p + "self_attn.k_proj.weight", KV_HEADS * hd, D)
            add(p + "self_attn.v_proj.weight", KV_HEADS * hd, D)
            add(p + "self_attn.o_proj.weight", D, HEADS * hd)
            if qkv_bias:
                add(p + "self_attn.q_proj.bias", HEADS * hd)
                add(p + "self_attn.k_proj.bias", KV_HEADS * hd)
                add(p + "self_attn.v_proj.bias", KV_HEADS * hd)
            if qk_norm:
                add(p + "self_attn.q_norm.weight", hd)
                add(p + "self_attn.k_norm.weight", hd)
            add(p + "post_attention_layernorm.weight", D)
            if qwen3moe:
                add(p + "mlp.gate.weight", EXPERTS, D)
                for j in range(EXPERTS):
                    add(p + f"mlp.experts.{j}.gate_proj.weight", F, D)
                    add(p + f"mlp.experts.{j}.up_proj.weight", F, D)
                    add(p + f"mlp.experts.{j}.down_proj.weight", D, F)
                if qwen2moe:
                    add(p + "mlp.shared_expert.gate_proj.weight", SHARED, D)
                    add(p + "mlp.shared_expert.up_proj.weight", SHARED, D)
                    add(p + "mlp.shared_expert.down_proj.weight", D, SHARED)
                    add(p + "mlp.shared_expert_gate.weight", 1, D)
                continue
            if mixtral:
                add(p + "block_sparse_moe.gate.weight", EXPERTS, D)
                for j in range(EXPERTS):
                    add(p + f"block_sparse_moe.experts.{j}.w1.weight", F, D)
                    add(p + f"block_sparse_moe.experts.{j}.w2.weight", D, F)
                    add(p + f"block_sparse_moe.experts.{j}.w3.weight", F, D)
                continue
            add(p + "mlp.gate_proj.weight", F, D)
            add(p + "mlp.up_proj.weight", F, D)
            add(p + "mlp.down_proj.weight", D, F)
        add("model.norm.weight", D)
        add("lm_head.weight", vocab, D)
        return out

    add("transformer.wte.weight", V, D)
    add("transformer.wpe.weight", T, D)
    for i in range(LAYERS):
        p = f"transformer.h.{i}."
        for ln in ("ln_1", "ln_2"):
            add(p + ln + ".weight", D)
            add(p + ln + ".bias", D)
        add(p + "attn.c_attn.weight", D, 3 * D)
        add(p + "attn.c_attn.bias", 3 * D)
        add(p + "attn.c_proj.weight", D, D)
        add(p + "attn.c_proj.bias", D)
        add(p + "mlp.c_fc.weight", D, F)
        add(p + "mlp.c_fc.bias", F)
        add(p + "mlp.c_proj.weight", F, D)
        add(p + "mlp.c_proj.bias", D)
    add("transformer.ln_f.weight", D)
    add("transformer.ln_f.bias", D)
    return out


# The --tokenizer vocabulary, laid out as Llama 2's: <unk> <s> </s>, the 256 byte-fallback tokens <0x00>..<0xFF>,
# then the learned tokens; six merges make "the" and "and" one token each after "▁". With it the model's
# vocab_size is len(SP_VOCAB) (272), not V.
SP = "\u2581"
SP_LEARNED = [SP, "t", "h", "e", "a", "n", "d", SP + "t", "he", SP + "the", "an", SP + "an", SP + "and"]
SP_MERGES = [SP + " t", "h e", SP + "t he", "a n", SP + " an", SP + "an d"]
SP_VOCAB = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)] + SP_LEARNED


def sentencepiece_tokenizer():
    """A Llama 2-style tokenizer.json: Prepend/Replace normalizer, byte fallback, "<s> $A" post-processor."""
    specials = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
                 "special": True} for i, c in enumerate(SP_VOCAB[:3])]
    bos = {"SpecialToken": {"id": "<s>", "type_id": 0}}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": specials,
            "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": SP},
                           {"type": "Replace", "pattern": {"String": " "}, "content": SP}]},
            "pre_tokenizer": None,
            "post_processor": {"type": "TemplateProcessing", "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
                               "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, bos,
                                        {"Sequence": {"id": "B", "type_id": 1}}],
                               "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": SP}, "content": " "}, {"type": "ByteFallback"},
                {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
            "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                      "vocab": {t: i for i, t in enumerate(SP_VOCAB)}, "merges": SP_MERGES}}


def write_safetensors(path, items):
    header, data, offset = {"__metadata__": {"format": "pt"}}, b"", 0
    for name, (shape, values) in items:
        blob = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        data += blob
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--llama", action="store_true")
    ap.add_argument("--mixtral", action="store_true")
    ap.add_argument("--qwen3moe", action="store_true")
    ap.add_argument("--qwen3", action="store_true")
    ap.add_argument("--qwen2moe", action="store_true")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--drop")
    ap.add_argument("--extra")
    ap.add_argument("--reshape")
    ap.add_argument("--nan")
    ap.add_argument("--mistral", type=int, help="MistralForCausalLM with this sliding_window (0: null)")
    ap.add_argument("--qwen2", action="store_true")
    ap.add_argument("--qwen2-window", type=int, default=0,
                    help="with --qwen2: use_sliding_window true with this sliding_window, from --max-window-layers on")
    ap.add_argument("--max-window-layers", type=int, default=LAYERS)
    ap.add_argument("--max-positions", type=int, default=T)
    ap.add_argument("--tokenizer", action="store_true",
                    help="also a SentencePiece-style tokenizer.json (vocab_size 272) and tokenizer_config.json")
    a = ap.parse_args()
    a.llama = a.llama or a.qwen2 or a.qwen3 or a.mistral is not None
    moe = a.mixtral or a.qwen3moe or a.qwen2moe
    vocab = len(SP_VOCAB) if a.tokenizer else V
    w = tensors(a.seed, a.llama or moe, qkv_bias=a.qwen2 or a.qwen2moe, mixtral=moe, qk_norm=a.qwen3 or a.qwen3moe,
                qwen3moe=a.qwen3moe or a.qwen2moe, vocab=vocab, qwen2moe=a.qwen2moe)
    if a.drop:
        del w[a.drop]
    if a.extra:
        w[a.extra] = ([D], [0.5] * D)
    if a.reshape:
        shape, values = w[a.reshape]
        w[a.reshape] = (list(reversed(shape)), values)
    if a.nan:
        w[a.nan][1][3] = float("nan")
    os.makedirs(a.out)
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V, "n_embd": D,
              "n_layer": LAYERS, "n_head": HEADS, "n_positions": T, "n_inner": F, "activation_function": "gelu_new",
              "layer_norm_epsilon": 1e-05, "tie_word_embeddings": True, "torch_dtype": "float32"}
    if a.llama:
        config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab, "hidden_size": D,
                  "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
                  "intermediate_size": F, "max_position_embeddings": T, "rms_norm_eps": 1e-06,
                  "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"}, "hidden_act": "silu",
                  "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False, "torch_dtype": "float32",
                  "bos_token_id": 1, "eos_token_id": 2, "transformers_version": "4.57.1"}
        config["max_position_embeddings"] = a.max_positions
        if a.mistral is not None or a.qwen2 or a.qwen3:
            del config["mlp_bias"]
        if a.mistral is not None or a.qwen2:
            del config["attention_bias"]
        if a.mistral is not None:
            config.update(architectures=["MistralForCausalLM"], model_type="mistral",
                          sliding_window=a.mistral if a.mistral > 0 else None)
        if a.qwen2:
            config.update(architectures=["Qwen2ForCausalLM"], model_type="qwen2", use_sliding_window=False,
                          sliding_window=a.max_positions, max_window_layers=LAYERS)
            if a.qwen2_window:
                config.update(use_sliding_window=True, sliding_window=a.qwen2_window,
                              max_window_layers=a.max_window_layers,
                              layer_types=["sliding_attention" if i >= a.max_window_layers else "full_attention"
                                           for i in range(LAYERS)])
        if a.qwen3:
            config.update(architectures=["Qwen3ForCausalLM"], model_type="qwen3", use_sliding_window=False,
                          sliding_window=None, max_window_layers=LAYERS, head_dim=D // HEADS,
                          layer_types=["full_attention"] * LAYERS)
    if moe:
        config = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "vocab_size": V,
                  "hidden_size": D, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
                  "num_key_value_heads": KV_HEADS, "head_dim": None, "intermediate_size": F,
                  "max_position_embeddings": T, "rms_norm_eps": 1e-05, "num_local_experts": EXPERTS,
                  "num_experts_per_tok": TOP_K, "router_aux_loss_coef": 0.02, "router_jitter_noise": 0.0,
                  "output_router_logits": False, "sliding_window": None,
                  "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}, "hidden_act": "silu",
                  "tie_word_embeddings": False, "dtype": "float32"}
        config["max_position_embeddings"] = a.max_positions
    if a.qwen3moe:  # as transformers 5 writes it (num_local_experts for num_experts, an unused dense width)
        config.update({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "head_dim": D // HEADS,
                       "intermediate_size": 40, "moe_intermediate_size": F, "norm_topk_prob": False,
                       "decoder_sparse_step": 1, "mlp_only_layers": [], "attention_bias": False,
                       "use_sliding_window": False, "rms_norm_eps": 1e-06,
                       "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}})
        del config["router_jitter_noise"]
    if a.qwen2moe:  # as transformers 5 writes it (qkv_bias, sliding_window 0 without use_sliding_window)
        config.update({"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "num_experts": EXPERTS,
                       "intermediate_size": 40, "moe_intermediate_size": F, "shared_expert_intermediate_size": SHARED,
                       "norm_topk_prob": False, "decoder_sparse_step": 1, "mlp_only_layers": [], "qkv_bias": True,
                       "use_sliding_window": False, "sliding_window": 0, "max_window_layers": 28,
                       "layer_types": ["full_attention"] * LAYERS, "rms_norm_eps": 1e-06,
                       "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}})
        for key in ("router_jitter_noise", "num_local_experts", "head_dim"):
            del config[key]
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    if a.tokenizer:
        with open(os.path.join(a.out, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(sentencepiece_tokenizer(), f, ensure_ascii=False, indent=1)
        with open(os.path.join(a.out, "tokenizer_config.json"), "w") as f:
            json.dump({"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
                       "unk_token": "<unk>", "tokenizer_class": "LlamaTokenizer"}, f, indent=1)
    names = sorted(w)
    if a.shards == 1:
        write_safetensors(os.path.join(a.out, "model.safetensors"), [(n, w[n]) for n in names])
        return
    weight_map = {}
    for s in range(a.shards):
        file = f"model-{s + 1:05d}-of-{a.shards:05d}.safetensors"
        part = names[s :: a.shards]
        write_safetensors(os.path.join(a.out, file), [(n, w[n]) for n in part])
        weight_map.update({n: file for n in part})
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=2)


if __name__ == "__main__":
    main()

// Hugging Face <-> Cleave tensor names and shapes: pure data, no files.
//
// tensor_map(dims) lists every tensor of a model once, in Cleave's block order, with its name and shape on
// both sides and the one transform between them. Invariant: applying `transform` to the HF tensor (shape
// hf_shape) gives the Cleave tensor (shape cleave_shape) element for element, and the inverse transform
// takes it back bit-exactly (a transpose moves floats, it never rounds them).
//
//   GPT2LMHeadModel (transformers' GPT-2; its Linear layers are Conv1D, weight stored [in, out]):
//     transformer.wte.weight [V,D]            -> embed.token [V,D]
//     transformer.wpe.weight [T,D]            -> embed.position [T,D]
//     transformer.h.{i}.ln_1.{weight,bias}    -> blocks.{i}.ln1.*
//     transformer.h.{i}.attn.c_attn.weight [D,3D] (transposed) -> blocks.{i}.attn.qkv.weight [3D,D]
//       (c_attn's output columns are q|k|v, head h at h*hd inside each third: Cleave's qkv rows exactly)
//     transformer.h.{i}.attn.c_attn.bias [3D] -> blocks.{i}.attn.qkv.bias
//     transformer.h.{i}.attn.c_proj.* [D,D]   -> blocks.{i}.attn.proj.* (weight transposed)
//     transformer.h.{i}.ln_2.*                -> blocks.{i}.ln2.*
//     transformer.h.{i}.mlp.c_fc.* [D,F]      -> blocks.{i}.mlp.fc.* [F,D] (weight transposed)
//     transformer.h.{i}.mlp.c_proj.* [F,D]    -> blocks.{i}.mlp.proj.* [D,F] (weight transposed)
//     transformer.ln_f.*                      -> final_norm.*
//     lm_head.weight [V,D]                    -> head.weight (only when untied)
//   LlamaForCausalLM (nn.Linear, [out, in] on both sides; rotary in rotate_half layout on both sides, so q
//   and k need no permutation):
//     model.embed_tokens.weight [V,D]         -> embed.token
//     model.layers.{i}.input_layernorm.weight -> blocks.{i}.attn_norm.weight [D]
//     model.layers.{i}.self_attn.{q,k,v,o}_proj.weight -> blocks.{i}.attn.{q,k,v,o}.weight
//       ([Hq·hd,D], [Hkv·hd,D], [Hkv·hd,D], [D,Hq·hd])
//     model.layers.{i}.post_attention_layernorm.weight -> blocks.{i}.mlp_norm.weight [D]
//     model.layers.{i}.mlp.{gate,up,down}_proj.weight  -> blocks.{i}.mlp.{gate,up,down}.weight ([F,D],[F,D],[D,F])
//     model.norm.weight                       -> final_norm.weight
//     lm_head.weight                          -> head.weight (only when untied)
//   MistralForCausalLM: Llama's names. Qwen2ForCausalLM: Llama's names plus
//     model.layers.{i}.self_attn.{q,k,v}_proj.bias -> blocks.{i}.attn.{q,k,v}.bias ([Hq·hd], [Hkv·hd], [Hkv·hd])
//   MixtralForCausalLM (Cleave model.type "moe", softmax router, k weights renormalised, no shared experts):
//     the Llama names above for embedding, attention, norms and head, and per block i, expert j:
//     model.layers.{i}.block_sparse_moe.gate.weight [E,D]      -> blocks.{i}.moe.router.weight [E,D]
//     model.layers.{i}.block_sparse_moe.experts.{j}.w1.weight [F,D] -> slice j of blocks.{i}.moe.experts.gate.weight [E,F,D]
//     model.layers.{i}.block_sparse_moe.experts.{j}.w3.weight [F,D] -> slice j of blocks.{i}.moe.experts.up.weight [E,F,D]
//     model.layers.{i}.block_sparse_moe.experts.{j}.w2.weight [D,F] -> slice j of blocks.{i}.moe.experts.down.weight [E,D,F]
//     (the per-expert names save_pretrained writes; a sliced row's cleave_shape is the whole stacked tensor)
//   Qwen3ForCausalLM (model.type "llama", model.qk_norm true): Llama's names plus, after o_proj,
//     model.layers.{i}.self_attn.{q,k}_norm.weight [hd] -> blocks.{i}.attn.{q,k}_norm.weight [hd]
//   Qwen3MoeForCausalLM (model.type "moe", model.qk_norm true): Qwen3's attention names and per block i, expert j:
//     model.layers.{i}.mlp.gate.weight [E,D]   -> blocks.{i}.moe.router.weight [E,D]
//     model.layers.{i}.mlp.experts.{j}.{gate,up,down}_proj.weight -> slice j of blocks.{i}.moe.experts.{gate,up,down}.weight
// Extending: a new architecture is an enum value here, its names in engine/hf/families/<architecture>.cpp with a
// row in hf_architecture.cpp (hf_architecture.hpp), and its config keys in hf_config.hpp's comment.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cleave::hf {

enum class Architecture { kGpt2, kLlama, kMistral, kQwen2, kMixtral, kQwen3, kQwen3Moe, kQwen2Moe };

// transformers' class name: "GPT2LMHeadModel", "LlamaForCausalLM".
std::string_view architecture_class(Architecture a);
// config.json "model_type": "gpt2", "llama".
std::string_view architecture_model_type(Architecture a);

// The sizes that fix every tensor's shape.
struct ModelDims {
  Architecture architecture = Architecture::kGpt2;
  std::int64_t vocab_size = 0;
  std::int64_t d_model = 0;
  std::int64_t n_layers = 0;
  std::int64_t n_heads = 0;
  std::int64_t n_kv_heads = 0;  // llama; gpt2: n_heads
  std::int64_t ffn = 0;         // gpt2 d_ff, llama ffn_hidden_size
  std::int64_t seq_len = 0;     // gpt2: the position table's rows; llama-like: max_position_embeddings
  bool tied = true;             // the LM head is the embedding table (no head.weight / lm_head.weight)
  bool qkv_bias = false;        // llama-like: q, k, v projections carry biases (Qwen2)
  bool qk_norm = false;         // llama-like: per-head RMSNorm of q and k before rope (Qwen3, Qwen3-MoE)
  std::int64_t n_experts = 0;   // moe: routed experts per block (0 otherwise)
  std::int64_t top_k = 0;       // moe: experts per token
  std::int64_t n_shared_experts = 0;  // moe: the shared SwiGLU is n_shared_experts · ffn wide (0: none)
  bool shared_expert_gate = false;    // moe: the shared experts' output is sigmoid-gated (Qwen2-MoE)
};

enum class Transform {
  kCopy,       // same shape, same order
  kTranspose,  // 2-D: HF [a, b] holds Cleave's [b, a] transposed (GPT-2 Conv1D weights)
};

struct TensorMap {
  std::string hf_name;
  std::vector<std::int64_t> hf_shape;
  std::string cleave_name;
  std::vector<std::int64_t> cleave_shape;
  Transform transform = Transform::kCopy;
  // >= 0: the HF tensor (hf_shape) is slice `slice` along dim 0 of the Cleave tensor, whose whole shape
  // cleave_shape is (one expert of Cleave's stacked [E, ...] expert weights); several rows share cleave_name.
  // -1: the HF tensor is the whole Cleave tensor.
  std::int64_t slice = -1;
};

// Every tensor of the model, in Cleave's block order (embedding, blocks, final norm, head).
std::vector<TensorMap> tensor_map(const ModelDims& dims);

// HF tensors that are buffers, not weights (skipped on import): GPT-2's attn.bias / attn.masked_bias (the
// causal mask), Llama's rotary_emb.inv_freq.
bool is_hf_buffer(Architecture a, std::string_view hf_name);

// "[3,4]".
std::string shape_text(const std::vector<std::int64_t>& shape);

// The transform applied to `in` (HF order) giving Cleave's order, and back. `hf_shape` is the HF tensor's.
std::vector<float> to_cleave(const TensorMap& m, const std::vector<float>& in);
std::vector<float> to_hf(const TensorMap& m, const std::vector<float>& in);

}  // namespace cleave::hf

// tensor_map and the transforms (hf_layout.hpp).
#include "engine/hf/hf_layout.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/core/error.hpp"

namespace cleave::hf {
namespace {

using Dims = std::vector<std::int64_t>;

void add(std::vector<TensorMap>& out, std::string hf, Dims hf_shape, std::string cleave, Dims cleave_shape,
         Transform t = Transform::kCopy) {
  out.push_back({std::move(hf), std::move(hf_shape), std::move(cleave), std::move(cleave_shape), t});
}

// A Conv1D of GPT-2: weight stored [in, out] (transposed to Cleave's [out, in]), bias [out].
void add_conv1d(std::vector<TensorMap>& out, const std::string& hf, const std::string& cleave, std::int64_t in,
                std::int64_t outs) {
  add(out, hf + ".weight", {in, outs}, cleave + ".weight", {outs, in}, Transform::kTranspose);
  add(out, hf + ".bias", {outs}, cleave + ".bias", {outs});
}

void add_layernorm(std::vector<TensorMap>& out, const std::string& hf, const std::string& cleave, std::int64_t d) {
  add(out, hf + ".weight", {d}, cleave + ".weight", {d});
  add(out, hf + ".bias", {d}, cleave + ".bias", {d});
}

std::vector<TensorMap> gpt2_map(const ModelDims& m) {
  const std::int64_t d = m.d_model;
  std::vector<TensorMap> out;
  add(out, "transformer.wte.weight", {m.vocab_size, d}, "embed.token", {m.vocab_size, d});
  add(out, "transformer.wpe.weight", {m.seq_len, d}, "embed.position", {m.seq_len, d});
  for (std::int64_t i = 0; i < m.n_layers; ++i) {
    const std::string hf = fmt::format("transformer.h.{}.", i);
    const std::string ours = fmt::format("blocks.{}.", i);
    add_layernorm(out, hf + "ln_1", ours + "ln1", d);
    add_conv1d(out, hf + "attn.c_attn", ours + "attn.qkv", d, 3 * d);
    add_conv1d(out, hf + "attn.c_proj", ours + "attn.proj", d, d);
    add_layernorm(out, hf + "ln_2", ours + "ln2", d);
    add_conv1d(out, hf + "mlp.c_fc", ours + "mlp.fc", d, m.ffn);
    add_conv1d(out, hf + "mlp.c_proj", ours + "mlp.proj", m.ffn, d);
  }
  add_layernorm(out, "transformer.ln_f", "final_norm", d);
  if (!m.tied) add(out, "lm_head.weight", {m.vocab_size, d}, "head.weight", {m.vocab_size, d});
  return out;
}

std::vector<TensorMap> llama_map(const ModelDims& m) {
  const std::int64_t d = m.d_model, f = m.ffn;
  const std::int64_t hd = d / m.n_heads;
  const std::int64_t q = m.n_heads * hd, kv = m.n_kv_heads * hd;
  std::vector<TensorMap> out;
  add(out, "model.embed_tokens.weight", {m.vocab_size, d}, "embed.token", {m.vocab_size, d});
  for (std::int64_t i = 0; i < m.n_layers; ++i) {
    const std::string hf = fmt::format("model.layers.{}.", i);
    const std::string ours = fmt::format("blocks.{}.", i);
    add(out, hf + "input_layernorm.weight", {d}, ours + "attn_norm.weight", {d});
    add(out, hf + "self_attn.q_proj.weight", {q, d}, ours + "attn.q.weight", {q, d});
    add(out, hf + "self_attn.k_proj.weight", {kv, d}, ours + "attn.k.weight", {kv, d});
    add(out, hf + "self_attn.v_proj.weight", {kv, d}, ours + "attn.v.weight", {kv, d});
    add(out, hf + "self_attn.o_proj.weight", {d, q}, ours + "attn.o.weight", {d, q});
    add(out, hf + "post_attention_layernorm.weight", {d}, ours + "mlp_norm.weight", {d});
    add(out, hf + "mlp.gate_proj.weight", {f, d}, ours + "mlp.gate.weight", {f, d});
    add(out, hf + "mlp.up_proj.weight", {f, d}, ours + "mlp.up.weight", {f, d});
    add(out, hf + "mlp.down_proj.weight", {d, f}, ours + "mlp.down.weight", {d, f});
  }
  add(out, "model.norm.weight", {d}, "final_norm.weight", {d});
  if (!m.tied) add(out, "lm_head.weight", {m.vocab_size, d}, "head.weight", {m.vocab_size, d});
  return out;
}

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

std::vector<float> transpose(const std::vector<float>& in, std::int64_t rows, std::int64_t cols) {
  CLEAVE_ASSERT(static_cast<std::int64_t>(in.size()) == rows * cols, "transpose of {} elements as {}x{}", in.size(),
                rows, cols);
  std::vector<float> out(in.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c)
      out[static_cast<std::size_t>(c * rows + r)] = in[static_cast<std::size_t>(r * cols + c)];
  }
  return out;
}

}  // namespace

std::string_view architecture_class(Architecture a) {
  return a == Architecture::kGpt2 ? "GPT2LMHeadModel" : "LlamaForCausalLM";
}

std::string_view architecture_model_type(Architecture a) { return a == Architecture::kGpt2 ? "gpt2" : "llama"; }

std::vector<TensorMap> tensor_map(const ModelDims& dims) {
  CLEAVE_ASSERT(dims.n_heads > 0 && dims.d_model % dims.n_heads == 0, "tensor_map: d_model {} over {} heads",
                dims.d_model, dims.n_heads);
  return dims.architecture == Architecture::kGpt2 ? gpt2_map(dims) : llama_map(dims);
}

bool is_hf_buffer(Architecture a, std::string_view name) {
  if (a == Architecture::kGpt2) return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias");
  return ends_with(name, ".rotary_emb.inv_freq");
}

std::string shape_text(const std::vector<std::int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ",")); }

std::vector<float> to_cleave(const TensorMap& m, const std::vector<float>& in) {
  if (m.transform == Transform::kCopy) return in;
  return transpose(in, m.hf_shape[0], m.hf_shape[1]);
}

std::vector<float> to_hf(const TensorMap& m, const std::vector<float>& in) {
  if (m.transform == Transform::kCopy) return in;
  return transpose(in, m.cleave_shape[0], m.cleave_shape[1]);
}

}  // namespace cleave::hf

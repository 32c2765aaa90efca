// ModelSpec builders: turn a model config into the ordered block list documented in model_spec.hpp.
//
// Invariants: every block's input shape equals the previous block's output shape; every size is > 0;
// each bad size is refused with a ConfigKeyError ("model.<key>: ...") that names the numbers. These checks
// are the only copy of the model's rules: the config layer runs them too (engine/config/config.cpp).
// llama uses gpt's block names ("embed", "blocks.<i>", "final_norm", "head", "loss").
// Block names follow PyTorch habits so parameter names line up with a reference model: gpt uses "embed",
// "blocks.<i>", "final_norm", "head", "loss"; mlp and cnn number their blocks like nn.Sequential
// ("layers.0" linear, "layers.1" relu, ...), so the weights are "layers.0.weight", "layers.2.weight", ...
#include "partition/model_spec.hpp"

#include <fmt/format.h>

#include "engine/core/error.hpp"

namespace cleave::partition {

std::string_view block_kind_name(BlockKind kind) {
  switch (kind) {
    case BlockKind::kEmbedding: return "embedding";
    case BlockKind::kTransformerBlock: return "transformer_block";
    case BlockKind::kLayerNorm: return "layernorm";
    case BlockKind::kLmHead: return "lm_head";
    case BlockKind::kLinear: return "linear";
    case BlockKind::kRelu: return "relu";
    case BlockKind::kGelu: return "gelu";
    case BlockKind::kConv2d: return "conv2d";
    case BlockKind::kMaxPool: return "maxpool";
    case BlockKind::kFlatten: return "flatten";
    case BlockKind::kSoftmaxCrossEntropy: return "softmax_cross_entropy";
    case BlockKind::kLlamaBlock: return "llama_block";
    case BlockKind::kRmsNorm: return "rmsnorm";
  }
  CLEAVE_ASSERT(false, "unknown BlockKind {}", static_cast<int>(kind));
}

namespace {

void check_positive(std::int64_t value, std::string_view key) {
  CLEAVE_CHECK_KEY(value > 0, fmt::format("model.{}", key), "must be > 0, got {}", value);
}

// The fields every block has: what it is, its name, its per-sample boundary shapes and (0 where unused)
// its feature sizes; the kind-specific fields are set by the caller.
BlockSpec make_block(BlockKind kind, std::string name, const Shape& input, const Shape& output,
                     std::int64_t in_features = 0, std::int64_t out_features = 0) {
  BlockSpec block;
  block.kind = kind;
  block.name = std::move(name);
  block.input = input;
  block.output = output;
  block.in_features = in_features;
  block.out_features = out_features;
  return block;
}

BlockSpec make_loss_block(const Shape& logits, std::int64_t classes) {
  return make_block(BlockKind::kSoftmaxCrossEntropy, "loss", logits, Shape{}, classes);
}

}  // namespace

ModelSpec make_gpt_spec(const GptConfig& config) {
  check_positive(config.vocab_size, "vocab_size");
  check_positive(config.d_model, "d_model");
  check_positive(config.n_layers, "n_layers");
  check_positive(config.n_heads, "n_heads");
  check_positive(config.seq_len, "seq_len");
  CLEAVE_CHECK_KEY(config.d_ff >= 0, "model.d_ff", "must be >= 0 (0 means 4 * d_model), got {}", config.d_ff);
  CLEAVE_CHECK_KEY(config.d_model % config.n_heads == 0, "model.d_model",
                   "{} is not divisible by model.n_heads {} (head size would be {:.3g}): each head gets d_model / "
                   "n_heads columns",
                   config.d_model, config.n_heads,
                   static_cast<double>(config.d_model) / static_cast<double>(config.n_heads));

  ModelSpec spec;
  spec.type = ModelType::kGpt;
  spec.gpt = config;
  if (spec.gpt.d_ff == 0) spec.gpt.d_ff = 4 * config.d_model;
  const std::int64_t t = config.seq_len, d = config.d_model, v = config.vocab_size;

  BlockSpec embed = make_block(BlockKind::kEmbedding, "embed", Shape{t}, Shape{t, d}, 0, d);
  embed.input_dtype = DType::kI32;
  embed.vocab_size = v;
  embed.seq_len = t;
  spec.blocks.push_back(embed);

  for (std::int64_t i = 0; i < config.n_layers; ++i) {
    BlockSpec block =
        make_block(BlockKind::kTransformerBlock, fmt::format("blocks.{}", i), Shape{t, d}, Shape{t, d}, d, d);
    block.seq_len = t;
    block.n_heads = config.n_heads;
    block.d_ff = spec.gpt.d_ff;
    spec.blocks.push_back(block);
  }

  spec.blocks.push_back(make_block(BlockKind::kLayerNorm, "final_norm", Shape{t, d}, Shape{t, d}, d, d));

  BlockSpec head = make_block(BlockKind::kLmHead, "head", Shape{t, d}, Shape{t, v}, d, v);
  head.vocab_size = v;
  head.tied = config.tie_embeddings;
  spec.blocks.push_back(head);

  BlockSpec loss = make_loss_block(Shape{t, v}, v);
  loss.vocab_size = v;
  spec.blocks.push_back(loss);
  if (config.tie_embeddings) spec.tied_parameters = {spec.blocks.front().name + ".token"};
  return spec;
}

std::int64_t llama_ffn_hidden_size(std::int64_t d_model) {
  const std::int64_t two_thirds = 2 * (4 * d_model) / 3;
  return (two_thirds + 63) / 64 * 64;
}

LlamaConfig llama_defaults(LlamaConfig config) {
  if (config.n_kv_heads == 0) config.n_kv_heads = config.n_heads;
  if (config.ffn_hidden_size == 0) config.ffn_hidden_size = llama_ffn_hidden_size(config.d_model);
  return config;
}

ModelSpec::TokenSizes ModelSpec::token_sizes() const {
  if (type == ModelType::kLlama) {
    return {llama.vocab_size, llama.d_model,         llama.n_layers,      llama.n_heads,
            llama.seq_len,    llama.ffn_hidden_size, llama.tie_embeddings};
  }
  CLEAVE_ASSERT(type == ModelType::kGpt, "token_sizes of a {} model", enum_name(type));
  return {gpt.vocab_size, gpt.d_model, gpt.n_layers, gpt.n_heads, gpt.seq_len, gpt.d_ff, gpt.tie_embeddings};
}

ModelSpec make_llama_spec(const LlamaConfig& given) {
  check_positive(given.vocab_size, "vocab_size");
  check_positive(given.d_model, "d_model");
  check_positive(given.n_layers, "n_layers");
  check_positive(given.n_heads, "n_heads");
  check_positive(given.seq_len, "seq_len");
  CLEAVE_CHECK_KEY(given.n_kv_heads >= 0, "model.n_kv_heads", "must be > 0 (absent means model.n_heads), got {}",
                   given.n_kv_heads);
  CLEAVE_CHECK_KEY(given.ffn_hidden_size >= 0, "model.ffn_hidden_size",
                   "must be > 0 (absent means Llama's rule from d_model), got {}", given.ffn_hidden_size);
  const LlamaConfig config = llama_defaults(given);
  CLEAVE_CHECK_KEY(config.d_model % config.n_heads == 0, "model.d_model",
                   "{} is not divisible by model.n_heads {} (head size would be {:.3g}): each head gets d_model / "
                   "n_heads columns",
                   config.d_model, config.n_heads,
                   static_cast<double>(config.d_model) / static_cast<double>(config.n_heads));
  CLEAVE_CHECK_KEY((config.d_model / config.n_heads) % 2 == 0, "model.d_model",
                   "{} / model.n_heads {} gives head size {}, which must be even: rotary embeddings rotate pairs of "
                   "columns; change d_model or n_heads",
                   config.d_model, config.n_heads, config.d_model / config.n_heads);
  CLEAVE_CHECK_KEY(config.n_heads % config.n_kv_heads == 0, "model.n_kv_heads",
                   "{} does not divide model.n_heads {}: each key/value head serves a whole group of query heads; "
                   "use a divisor of n_heads",
                   config.n_kv_heads, config.n_heads);
  CLEAVE_CHECK_KEY(config.rope_theta > 0.0, "model.rope_theta", "must be > 0, got {}", config.rope_theta);
  CLEAVE_CHECK_KEY(config.norm_eps > 0.0, "model.norm_eps", "must be > 0, got {}", config.norm_eps);

  ModelSpec spec;
  spec.type = ModelType::kLlama;
  spec.llama = config;
  const std::int64_t t = config.seq_len, d = config.d_model, v = config.vocab_size;

  BlockSpec embed = make_block(BlockKind::kEmbedding, "embed", Shape{t}, Shape{t, d}, 0, d);
  embed.input_dtype = DType::kI32;
  embed.vocab_size = v;
  embed.seq_len = 0;  // no learned positions: rotary embeddings inside the attention
  spec.blocks.push_back(embed);

  for (std::int64_t i = 0; i < config.n_layers; ++i) {
    BlockSpec block =
        make_block(BlockKind::kLlamaBlock, fmt::format("blocks.{}", i), Shape{t, d}, Shape{t, d}, d, d);
    block.seq_len = t;
    block.n_heads = config.n_heads;
    block.n_kv_heads = config.n_kv_heads;
    block.d_ff = config.ffn_hidden_size;
    block.rope_theta = config.rope_theta;
    block.norm_eps = config.norm_eps;
    spec.blocks.push_back(block);
  }

  BlockSpec norm = make_block(BlockKind::kRmsNorm, "final_norm", Shape{t, d}, Shape{t, d}, d, d);
  norm.norm_eps = config.norm_eps;
  spec.blocks.push_back(norm);

  BlockSpec head = make_block(BlockKind::kLmHead, "head", Shape{t, d}, Shape{t, v}, d, v);
  head.vocab_size = v;
  head.tied = config.tie_embeddings;
  spec.blocks.push_back(head);

  BlockSpec loss = make_loss_block(Shape{t, v}, v);
  loss.vocab_size = v;
  spec.blocks.push_back(loss);
  if (config.tie_embeddings) spec.tied_parameters = {spec.blocks.front().name + ".token"};
  return spec;
}

ModelSpec make_mlp_spec(const MlpConfig& config) {
  check_positive(config.in_features, "in_features");
  check_positive(config.num_classes, "num_classes");
  for (std::size_t i = 0; i < config.hidden.size(); ++i) {
    CLEAVE_CHECK_KEY(config.hidden[i] > 0, fmt::format("model.hidden[{}]", i), "must be > 0, got {}", config.hidden[i]);
  }

  ModelSpec spec;
  spec.type = ModelType::kMlp;
  spec.mlp = config;
  int index = 0;
  std::int64_t features = config.in_features;
  auto add_linear = [&](std::int64_t out) {
    spec.blocks.push_back(
        make_block(BlockKind::kLinear, fmt::format("layers.{}", index++), Shape{features}, Shape{out}, features, out));
    features = out;
  };
  for (std::int64_t width : config.hidden) {
    add_linear(width);
    const BlockKind act = config.activation == Activation::kRelu ? BlockKind::kRelu : BlockKind::kGelu;
    spec.blocks.push_back(
        make_block(act, fmt::format("layers.{}", index++), Shape{features}, Shape{features}, features, features));
  }
  add_linear(config.num_classes);
  spec.blocks.push_back(make_loss_block(Shape{config.num_classes}, config.num_classes));
  return spec;
}

ModelSpec make_cnn_spec(const CnnConfig& config) {
  check_positive(config.in_channels, "in_channels");
  check_positive(config.height, "height");
  check_positive(config.width, "width");
  check_positive(config.kernel, "kernel");
  check_positive(config.pool, "pool");
  check_positive(config.num_classes, "num_classes");
  CLEAVE_CHECK_KEY(!config.channels.empty(), "model.channels", "must list at least one conv layer's output channels");
  for (std::size_t i = 0; i < config.channels.size(); ++i) {
    CLEAVE_CHECK_KEY(config.channels[i] > 0, fmt::format("model.channels[{}]", i), "must be > 0, got {}",
                     config.channels[i]);
  }
  CLEAVE_CHECK_KEY(config.kernel % 2 == 1, "model.kernel",
                   "{} must be odd: convolutions use stride 1 and \"same\" padding kernel / 2", config.kernel);
  {
    // Each stage divides both spatial sizes by the pool (floor); all must stay >= 1.
    std::int64_t h = config.height, w = config.width;
    std::string trail = fmt::format("{}×{}", h, w);
    for (std::size_t i = 0; i < config.channels.size(); ++i) {
      h /= config.pool;
      w /= config.pool;
      trail += fmt::format(" -> {}×{}", h, w);
      CLEAVE_CHECK_KEY(h >= 1 && w >= 1, "model.channels",
                       "{} conv stages with model.pool {} shrink model.height × model.width {}×{} to nothing at stage "
                       "{} ({}); use a larger input, fewer model.channels or a smaller pool",
                       config.channels.size(), config.pool, config.height, config.width, i + 1, trail);
    }
  }

  ModelSpec spec;
  spec.type = ModelType::kCnn;
  spec.cnn = config;
  int index = 0;
  std::int64_t c = config.in_channels, h = config.height, w = config.width;
  auto next_name = [&] { return fmt::format("layers.{}", index++); };
  for (std::int64_t out : config.channels) {
    BlockSpec conv = make_block(BlockKind::kConv2d, next_name(), Shape{c, h, w}, Shape{out, h, w}, c, out);
    conv.kernel = config.kernel;
    spec.blocks.push_back(conv);
    c = out;

    spec.blocks.push_back(make_block(BlockKind::kRelu, next_name(), Shape{c, h, w}, Shape{c, h, w}));

    BlockSpec pool = make_block(BlockKind::kMaxPool, next_name(), Shape{c, h, w},
                                Shape{c, h / config.pool, w / config.pool});
    pool.kernel = config.pool;
    spec.blocks.push_back(pool);
    h /= config.pool;
    w /= config.pool;
  }
  spec.blocks.push_back(make_block(BlockKind::kFlatten, next_name(), Shape{c, h, w}, Shape{c * h * w}));
  spec.blocks.push_back(make_block(BlockKind::kLinear, next_name(), Shape{c * h * w}, Shape{config.num_classes},
                                   c * h * w, config.num_classes));

  spec.blocks.push_back(make_loss_block(Shape{config.num_classes}, config.num_classes));
  return spec;
}

}  // namespace cleave::partition

// ModelSpec builders: turn a model config into the ordered block list documented in model_spec.hpp.
//
// Invariants: every block's input shape equals the previous block's output shape; every size is > 0;
// each bad size is refused with an Error that names the model.* config key and the numbers. Block names
// follow PyTorch habits so parameter names line up with a reference model: gpt uses "embed",
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
  }
  CLEAVE_ASSERT(false, "unknown BlockKind {}", static_cast<int>(kind));
}

namespace {

void check_positive(std::int64_t value, std::string_view key) {
  CLEAVE_CHECK(value > 0, "model.{} must be > 0, got {}", key, value);
}

BlockSpec make_loss_block(const Shape& logits, std::int64_t classes) {
  BlockSpec loss;
  loss.kind = BlockKind::kSoftmaxCrossEntropy;
  loss.name = "loss";
  loss.input = logits;
  loss.output = Shape{};
  loss.in_features = classes;
  return loss;
}

}  // namespace

ModelSpec make_gpt_spec(const GptConfig& config) {
  check_positive(config.vocab_size, "vocab_size");
  check_positive(config.d_model, "d_model");
  check_positive(config.n_layers, "n_layers");
  check_positive(config.n_heads, "n_heads");
  check_positive(config.seq_len, "seq_len");
  CLEAVE_CHECK(config.d_ff >= 0, "model.d_ff must be >= 0 (0 means 4 * d_model), got {}", config.d_ff);
  CLEAVE_CHECK(config.d_model % config.n_heads == 0,
               "model.d_model ({}) must be divisible by model.n_heads ({}): each head gets d_model / n_heads "
               "columns",
               config.d_model, config.n_heads);

  ModelSpec spec;
  spec.type = "gpt";
  spec.gpt = config;
  if (spec.gpt.d_ff == 0) spec.gpt.d_ff = 4 * config.d_model;
  const std::int64_t t = config.seq_len, d = config.d_model, v = config.vocab_size;

  BlockSpec embed;
  embed.kind = BlockKind::kEmbedding;
  embed.name = "embed";
  embed.input = Shape{t};
  embed.input_dtype = DType::kI32;
  embed.output = Shape{t, d};
  embed.out_features = d;
  embed.vocab_size = v;
  embed.seq_len = t;
  spec.blocks.push_back(embed);

  for (std::int64_t i = 0; i < config.n_layers; ++i) {
    BlockSpec block;
    block.kind = BlockKind::kTransformerBlock;
    block.name = fmt::format("blocks.{}", i);
    block.input = Shape{t, d};
    block.output = Shape{t, d};
    block.in_features = d;
    block.out_features = d;
    block.seq_len = t;
    block.n_heads = config.n_heads;
    block.d_ff = spec.gpt.d_ff;
    spec.blocks.push_back(block);
  }

  BlockSpec norm;
  norm.kind = BlockKind::kLayerNorm;
  norm.name = "final_norm";
  norm.input = Shape{t, d};
  norm.output = Shape{t, d};
  norm.in_features = d;
  norm.out_features = d;
  spec.blocks.push_back(norm);

  BlockSpec head;
  head.kind = BlockKind::kLmHead;
  head.name = "head";
  head.input = Shape{t, d};
  head.output = Shape{t, v};
  head.in_features = d;
  head.out_features = v;
  head.vocab_size = v;
  head.tied = config.tie_embeddings;
  spec.blocks.push_back(head);

  BlockSpec loss = make_loss_block(Shape{t, v}, v);
  loss.vocab_size = v;
  spec.blocks.push_back(loss);
  return spec;
}

ModelSpec make_mlp_spec(const MlpConfig& config) {
  check_positive(config.in_features, "in_features");
  check_positive(config.num_classes, "num_classes");
  for (std::size_t i = 0; i < config.hidden.size(); ++i) {
    CLEAVE_CHECK(config.hidden[i] > 0, "model.hidden[{}] must be > 0, got {}", i, config.hidden[i]);
  }
  CLEAVE_CHECK(config.activation == "relu" || config.activation == "gelu",
               "model.activation must be \"relu\" or \"gelu\", got \"{}\"", config.activation);

  ModelSpec spec;
  spec.type = "mlp";
  spec.mlp = config;
  int index = 0;
  std::int64_t features = config.in_features;
  auto add_linear = [&](std::int64_t out) {
    BlockSpec linear;
    linear.kind = BlockKind::kLinear;
    linear.name = fmt::format("layers.{}", index++);
    linear.input = Shape{features};
    linear.output = Shape{out};
    linear.in_features = features;
    linear.out_features = out;
    spec.blocks.push_back(linear);
    features = out;
  };
  for (std::int64_t width : config.hidden) {
    add_linear(width);
    BlockSpec act;
    act.kind = config.activation == "relu" ? BlockKind::kRelu : BlockKind::kGelu;
    act.name = fmt::format("layers.{}", index++);
    act.input = Shape{features};
    act.output = Shape{features};
    act.in_features = features;
    act.out_features = features;
    spec.blocks.push_back(act);
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
  CLEAVE_CHECK(!config.channels.empty(), "model.channels must list at least one conv layer's output channels");
  for (std::size_t i = 0; i < config.channels.size(); ++i) {
    CLEAVE_CHECK(config.channels[i] > 0, "model.channels[{}] must be > 0, got {}", i, config.channels[i]);
  }
  CLEAVE_CHECK(config.kernel % 2 == 1,
               "model.kernel ({}) must be odd: convolutions use stride 1 and \"same\" padding kernel / 2", config.kernel);
  {
    // Each stage divides both spatial sizes by the pool (floor); all must stay >= 1.
    std::int64_t h = config.height, w = config.width;
    std::string trail = fmt::format("{}x{}", h, w);
    for (std::size_t i = 0; i < config.channels.size(); ++i) {
      h /= config.pool;
      w /= config.pool;
      trail += fmt::format(" -> {}x{}", h, w);
      CLEAVE_CHECK(h >= 1 && w >= 1,
                   "model.height x model.width ({}x{}) does not survive {} max-pools of model.pool ({}): {}; use "
                   "a larger input, fewer model.channels or a smaller pool",
                   config.height, config.width, config.channels.size(), config.pool, trail);
    }
  }

  ModelSpec spec;
  spec.type = "cnn";
  spec.cnn = config;
  int index = 0;
  std::int64_t c = config.in_channels, h = config.height, w = config.width;
  auto next_name = [&] { return fmt::format("layers.{}", index++); };
  for (std::int64_t out : config.channels) {
    BlockSpec conv;
    conv.kind = BlockKind::kConv2d;
    conv.name = next_name();
    conv.input = Shape{c, h, w};
    conv.output = Shape{out, h, w};
    conv.in_features = c;
    conv.out_features = out;
    conv.kernel = config.kernel;
    spec.blocks.push_back(conv);
    c = out;

    BlockSpec relu;
    relu.kind = BlockKind::kRelu;
    relu.name = next_name();
    relu.input = Shape{c, h, w};
    relu.output = Shape{c, h, w};
    spec.blocks.push_back(relu);

    BlockSpec pool;
    pool.kind = BlockKind::kMaxPool;
    pool.name = next_name();
    pool.input = Shape{c, h, w};
    h /= config.pool;
    w /= config.pool;
    pool.output = Shape{c, h, w};
    pool.kernel = config.pool;
    spec.blocks.push_back(pool);
  }
  BlockSpec flatten;
  flatten.kind = BlockKind::kFlatten;
  flatten.name = next_name();
  flatten.input = Shape{c, h, w};
  flatten.output = Shape{c * h * w};
  spec.blocks.push_back(flatten);

  BlockSpec linear;
  linear.kind = BlockKind::kLinear;
  linear.name = next_name();
  linear.input = Shape{c * h * w};
  linear.output = Shape{config.num_classes};
  linear.in_features = c * h * w;
  linear.out_features = config.num_classes;
  spec.blocks.push_back(linear);

  spec.blocks.push_back(make_loss_block(Shape{config.num_classes}, config.num_classes));
  return spec;
}

}  // namespace cleave::partition

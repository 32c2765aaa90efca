// The cnn family's config checks, block list and table row (see cnn.hpp).
#include "partition/model_spec.hpp"

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "partition/families/spec_util.hpp"

namespace cleave::partition {

using spec_util::check_positive;
using spec_util::make_block;
using spec_util::make_loss_block;

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

namespace {

ModelSpec cnn_spec(const FamilyConfigs& c) { return make_cnn_spec(c.cnn); }

Family::ClassifierSizes cnn_classifier(const FamilyConfigs& c) {
  const CnnConfig& n = c.cnn;
  return {Shape{n.in_channels, n.height, n.width}, n.num_classes};
}

void cnn_check_digits_input(const FamilyConfigs& c) {
  const CnnConfig& n = c.cnn;
  CLEAVE_CHECK_KEY(n.in_channels == 1 && n.height == 8 && n.width == 8, "model",
                   "cnn input is in_channels {} × height {} × width {}, but digits images are 1 × 8 × 8",
                   n.in_channels, n.height, n.width);
}

}  // namespace

Family cnn_family() {
  Family f;
  f.type = ModelType::kCnn;
  f.name = "cnn";
  f.make_spec = cnn_spec;
  f.classifier = cnn_classifier;
  f.check_digits_input = cnn_check_digits_input;
  f.blocks_are = "a conv2d, relu and max-pool per model.channels entry, flatten, the linear to the classes and the loss";
  f.deeper_by = "model.channels, 3 blocks per entry";
  return f;
}

}  // namespace cleave::partition

// The mlp family's config checks, block list and table row (see mlp.hpp).
#include "partition/model_spec.hpp"

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "partition/families/spec_util.hpp"

namespace cleave::partition {

using spec_util::check_positive;
using spec_util::make_block;
using spec_util::make_loss_block;

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

namespace {

ModelSpec mlp_spec(const FamilyConfigs& c) { return make_mlp_spec(c.mlp); }

Family::ClassifierSizes mlp_classifier(const FamilyConfigs& c) { return {Shape{c.mlp.in_features}, c.mlp.num_classes}; }

void mlp_check_digits_input(const FamilyConfigs& c) {
  CLEAVE_CHECK_KEY(c.mlp.in_features == 64, "model.in_features", "{}, but digits images have 8×8 = 64 pixels",
                   c.mlp.in_features);
}

}  // namespace

Family mlp_family() {
  Family f;
  f.type = ModelType::kMlp;
  f.name = "mlp";
  f.make_spec = mlp_spec;
  f.classifier = mlp_classifier;
  f.check_digits_input = mlp_check_digits_input;
  f.blocks_are = "a linear and an activation per model.hidden entry, the linear to the classes and the loss";
  f.deeper_by = "model.hidden, 2 blocks per entry";
  return f;
}

}  // namespace cleave::partition

// The mlp family below the layers: a multi-layer perceptron classifier (digits or synthetic classes). Its
// config keys (model.* for model.type "mlp"), their checks and its block list; it has no blocks of its own
// (linear and activations are common kinds) and no tensor-parallel layout. Layers: the common builder
// (layers/models/builder.cpp); config fields: engine/config/fields.hpp kMlpFields.
//
// Block order: linear (+ activation) × len(hidden), linear to classes, softmax cross-entropy, numbered like
// nn.Sequential ("layers.0" linear, "layers.1" relu, ...).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "engine/core/enum_names.hpp"

namespace cleave::partition {

struct ModelSpec;
struct Family;

// model.activation (mlp).
enum class Activation { kRelu, kGelu };
constexpr std::array<EnumName<Activation>, 2> enum_names(Activation) {
  return {{{Activation::kRelu, "relu"}, {Activation::kGelu, "gelu"}}};
}

struct MlpConfig {
  std::int64_t in_features = 64;
  std::vector<std::int64_t> hidden = {128, 128};
  std::int64_t num_classes = 10;
  Activation activation = Activation::kRelu;
};

// Checks the sizes (ConfigKeyError naming model.<key> and the numbers) and builds the block list.
ModelSpec make_mlp_spec(const MlpConfig& config);

// The family's row in the table of family.hpp.
Family mlp_family();

}  // namespace cleave::partition

// The cnn family below the layers: a small convolutional classifier (digits). Its config keys (model.* for
// model.type "cnn"), their checks and its block list; its blocks are common kinds and it has no
// tensor-parallel layout. Layers: the common builder (layers/models/builder.cpp); config fields:
// engine/config/fields.hpp kCnnFields.
//
// Block order: (conv2d, relu, maxpool) × len(channels), flatten, linear to classes, softmax cross-entropy.
#pragma once

#include <cstdint>
#include <vector>

namespace cleave::partition {

struct ModelSpec;
struct Family;

struct CnnConfig {
  std::int64_t in_channels = 1;
  std::int64_t height = 8;
  std::int64_t width = 8;
  std::vector<std::int64_t> channels = {16, 32};
  std::int64_t kernel = 3;  // stride 1, "same" padding (kernel / 2)
  std::int64_t pool = 2;    // max-pool window and stride
  std::int64_t num_classes = 10;
};

// Checks the sizes (ConfigKeyError naming model.<key> and the numbers) and builds the block list.
ModelSpec make_cnn_spec(const CnnConfig& config);

// The family's row in the table of family.hpp.
Family cnn_family();

}  // namespace cleave::partition

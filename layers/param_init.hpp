// Creating and initialising Params.
//
// Invariant: a parameter's initial values depend only on (seed, logical name, element index) through
// engine/core/rng (keyed by rng::hash_key(name)), never on build order or layout, so two builds of the
// same model, or a pipeline stage holding a copy of a tied table, start from identical weights.
//
// Schemes (what a Megatron / nanoGPT or PyTorch user expects):
//  - kGpt2: weights normal(0, std) (std = 0.02, residual output projections 0.02 / sqrt(2 · n_layers)),
//    biases 0. Embedding tables normal(0, 0.02). LayerNorm gamma 1, beta 0.
//  - kTorchDefault: weight and bias uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) (nn.Linear / nn.Conv2d).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/core/allocator.hpp"
#include "engine/core/shape.hpp"
#include "layers/layer.hpp"

namespace cleave::layers {

enum class InitScheme { kGpt2, kTorchDefault };

// `allocator` has no default: parameters live where the run says (its capped allocator, or the host
// allocator a GPU run builds on), never on a fallback the run's memory cap does not see.
struct ParamInit {
  explicit ParamInit(Allocator& where) : allocator(where) {}

  Allocator& allocator;  // where values and grads live
  std::uint64_t seed = 1234;
  InitScheme scheme = InitScheme::kTorchDefault;
  float std = 0.02f;  // kGpt2 weight std

  ParamInit with_std(float s) const {
    ParamInit copy = *this;
    copy.std = s;
    return copy;
  }
};

// A replicated Param: value (kParameters, uninitialised) and grad (kGradients, zero).
std::shared_ptr<Param> make_param(std::string name, const Shape& shape, bool weight_decay, Allocator& allocator);

void init_normal(Param& param, std::uint64_t seed, float std);
void init_uniform(Param& param, std::uint64_t seed, float bound);
void init_constant(Param& param, float value);

// Weight [out, fan_in...] and optional bias of a linear or convolution, per `init`'s scheme.
void init_weight(Param& weight, std::int64_t fan_in, const ParamInit& init);
void init_bias(Param& bias, std::int64_t fan_in, const ParamInit& init);

}  // namespace cleave::layers

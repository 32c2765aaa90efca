// Param creation and the two initialisation schemes (see param_init.hpp).
#include "layers/param_init.hpp"

#include <cmath>

#include "engine/core/rng.hpp"
#include "engine/core/tensor.hpp"

namespace cleave::layers {

std::shared_ptr<Param> make_param(std::string name, const Shape& shape, bool weight_decay, Allocator& allocator) {
  auto p = std::make_shared<Param>();
  p->name = std::move(name);
  p->value = Tensor::empty(shape, DType::kF32, MemoryCategory::kParameters, allocator);
  p->grad = Tensor::zeros(shape, DType::kF32, MemoryCategory::kGradients, allocator);
  p->shard.logical = shape;
  p->weight_decay = weight_decay;
  return p;
}

void init_normal(Param& param, std::uint64_t seed, float std) {
  rng::fill_normal(param.value.data<float>(), param.value.numel(), seed, rng::hash_key(param.name), 0.0f, std);
}

void init_uniform(Param& param, std::uint64_t seed, float bound) {
  rng::fill_uniform(param.value.data<float>(), param.value.numel(), seed, rng::hash_key(param.name), -bound, bound);
}

void init_constant(Param& param, float value) { param.value.fill_(value); }

void init_weight(Param& weight, std::int64_t fan_in, const ParamInit& init) {
  if (init.scheme == InitScheme::kGpt2) {
    init_normal(weight, init.seed, init.std);
  } else {
    init_uniform(weight, init.seed, 1.0f / std::sqrt(static_cast<float>(fan_in)));
  }
}

void init_bias(Param& bias, std::int64_t fan_in, const ParamInit& init) {
  if (init.scheme == InitScheme::kGpt2) {
    init_constant(bias, 0.0f);
  } else {
    init_uniform(bias, init.seed, 1.0f / std::sqrt(static_cast<float>(fan_in)));
  }
}

}  // namespace cleave::layers

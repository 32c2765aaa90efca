// Sharded Param creation and slice-exact initialisation (see sharded_param.hpp).
#include "layers/parallel/sharded_param.hpp"

#include <cmath>

#include "engine/core/error.hpp"
#include "engine/core/rng.hpp"
#include "engine/core/tensor.hpp"
#include "layers/parallel/shard.hpp"

namespace cleave::layers {

std::shared_ptr<Param> make_sharded_param(std::string name, const ShardSpec& spec, bool weight_decay,
                                          Allocator& allocator) {
  const Shape shape = shard_shape(spec);
  auto p = std::make_shared<Param>();
  p->name = std::move(name);
  p->value = Tensor::zeros(shape, DType::kF32, MemoryCategory::kParameters, allocator);
  p->grad = Tensor::zeros(shape, DType::kF32, MemoryCategory::kGradients, allocator);
  p->shard = spec;
  p->weight_decay = weight_decay;
  return p;
}

namespace {

// A shard initialiser writes the shard's own elements: its value must have the shard's shape.
void check_shard_shape(const Param& param) {
  CLEAVE_ASSERT(param.value.shape() == shard_shape(param.shard), "param {}: value {} is not the shard shape {}",
                param.name, param.value.shape().str(), shard_shape(param.shard).str());
}

}  // namespace

void init_shard_normal(Param& param, std::uint64_t seed, float std) {
  check_shard_shape(param);
  float* out = param.value.data<float>();
  const std::uint64_t key = rng::hash_key(param.name);
  for_each_shard_run(param.shard, [&](std::int64_t logical, std::int64_t local, std::int64_t n) {
    rng::fill_normal(out + local, n, seed, key, 0.0f, std, logical);
  });
}

void init_shard_uniform(Param& param, std::uint64_t seed, float bound) {
  check_shard_shape(param);
  float* out = param.value.data<float>();
  const std::uint64_t key = rng::hash_key(param.name);
  for_each_shard_run(param.shard, [&](std::int64_t logical, std::int64_t local, std::int64_t n) {
    rng::fill_uniform(out + local, n, seed, key, -bound, bound, logical);
  });
}

void init_shard_weight(Param& weight, std::int64_t fan_in, const ParamInit& init) {
  if (init.scheme == InitScheme::kGpt2) {
    init_shard_normal(weight, init.seed, init.std);
  } else {
    init_shard_uniform(weight, init.seed, 1.0f / std::sqrt(static_cast<float>(fan_in)));
  }
}

void init_shard_bias(Param& bias, std::int64_t fan_in, const ParamInit& init) {
  if (init.scheme == InitScheme::kGpt2) {
    bias.value.zero_();
  } else {
    init_shard_uniform(bias, init.seed, 1.0f / std::sqrt(static_cast<float>(fan_in)));
  }
}

}  // namespace cleave::layers

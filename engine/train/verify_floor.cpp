// See verify_floor.hpp.
#include "engine/train/verify_floor.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "engine/core/enum_names.hpp"
#include "engine/optim/lr_schedule.hpp"
#include "kernels/ops/cpu_blas.hpp"

namespace cleave::train {
namespace {

// The library a run's GEMMs use (the bf16 kernels question does not change which library).
ops::CpuBlas library_of(const config::RunConfig& config) {
  return ops::choose_cpu_gemm(config.device.blas, false, ops::build_cpu_blas_facts(false)).library;
}

}  // namespace

std::vector<config::RunConfig> twin_references(const config::RunConfig& reference) {
  if (reference.device.precision != ops::Precision::kBf16 || reference.device.type != DeviceType::kCpu) return {};
  const ops::CpuBlas own = library_of(reference);
  ops::CpuBlas other = ops::CpuBlas::kOpenBlas;
  if (own == ops::CpuBlas::kOpenBlas) {
    if (ops::cpu_blas_built(ops::CpuBlas::kOneDnn)) {
      other = ops::CpuBlas::kOneDnn;
    } else if (ops::cpu_blas_built(ops::CpuBlas::kBlis)) {
      other = ops::CpuBlas::kBlis;
    } else {
      return {};
    }
  }
  std::vector<config::RunConfig> twins(2, reference);
  twins[0].device.blas = other;
  twins[0].device.attention_sums = ops::AttentionSums::kReordered;
  twins[1].device.attention_sums = ops::AttentionSums::kReorderedQuarters;
  return twins;
}

std::string describe_twin(const config::RunConfig& reference, const config::RunConfig& twin) {
  std::vector<std::string> parts;
  if (library_of(twin) != library_of(reference)) {
    parts.push_back(fmt::format("device.blas {} instead of {}", enum_name(library_of(twin)),
                                enum_name(library_of(reference))));
  }
  if (twin.device.attention_sums != reference.device.attention_sums) {
    parts.push_back(fmt::format("attention's sums reordered (f32 GEMM, key blocks {})",
                                twin.device.attention_sums == ops::AttentionSums::kReorderedQuarters ? "quartered"
                                                                                                      : "halved"));
  }
  if (twin.batch.micro_batch_size && reference.batch.micro_batch_size &&
      *twin.batch.micro_batch_size != *reference.batch.micro_batch_size) {
    parts.push_back(fmt::format("batch.micro_batch_size {} instead of {}", *twin.batch.micro_batch_size,
                                *reference.batch.micro_batch_size));
  }
  return parts.empty() ? std::string("nothing else") : fmt::format("{}", fmt::join(parts, " and "));
}

FloorPair floor_pair(const ParamComparison& compared, std::string runs) {
  FloorPair p;
  p.runs = std::move(runs);
  for (const ParamDifference& d : compared.params) {
    if (std::isnan(p.largest)) break;  // a NaN difference is the largest (it passes no tensor)
    if (std::isnan(d.moved) || d.moved > p.largest) {
      p.largest = d.moved;
      p.worst = d.name;
    }
  }
  return p;
}

std::vector<FloorPair> floor_pairs(const ParameterMap& reference, const ParameterMap& initial,
                                   std::span<const ParameterMap> twins,
                                   std::span<const partition::NullGradient> null_slices, double null_bound) {
  std::vector<FloorPair> pairs;
  for (std::size_t k = 0; k < twins.size(); ++k) {
    pairs.push_back(floor_pair(compare_parameters(twins[k], reference, null_slices, null_bound, &initial),
                               fmt::format("the reference and twin {}", k + 1)));
  }
  for (std::size_t j = 0; j < twins.size(); ++j) {
    for (std::size_t k = j + 1; k < twins.size(); ++k) {
      pairs.push_back(floor_pair(compare_parameters(twins[k], twins[j], null_slices, null_bound, &initial),
                                 fmt::format("twins {} and {}", j + 1, k + 1)));
    }
  }
  return pairs;
}

double adamw_flip_fraction(const config::OptimizerConfig& optimizer, std::int64_t steps) {
  if (optimizer.type != config::OptimizerType::kAdamw || steps < 1) return 0;
  const optim::LrSchedule schedule = optim::LrSchedule::from_config(optimizer, steps);
  double sum = 0;
  for (std::int64_t s = 0; s < steps; ++s) sum += std::abs(schedule.lr_at(s));
  return sum > 0 ? 2 * std::abs(schedule.lr_at(0)) / sum : 0;
}

NoiseFloor noise_floor(std::vector<FloorPair> pairs, double loss, std::vector<std::string> twins, double multiple,
                       double tp_factor, double flip) {
  NoiseFloor f;
  f.flip = flip;
  f.loss = loss;
  f.twins = std::move(twins);
  f.multiple = multiple;
  f.tp_factor = tp_factor;
  f.pairs = std::move(pairs);
  for (const FloorPair& p : f.pairs) {
    if (std::isnan(f.floor)) break;
    if (std::isnan(p.largest) || p.largest > f.floor) {
      f.floor = p.largest;
      f.worst = p.worst;
      f.pair = p.runs;
    }
  }
  return f;
}

std::optional<config::RunConfig> precision_twin(const config::RunConfig& reference) {
  if (reference.device.precision != ops::Precision::kBf16) return std::nullopt;
  config::RunConfig twin = reference;
  twin.device.precision = ops::Precision::kFp32;
  return twin;
}

std::vector<config::RunConfig> order_twins(const config::RunConfig& reference) {
  if (reference.device.precision != ops::Precision::kFp32 || reference.device.type != DeviceType::kCpu ||
      reference.optimizer.type != config::OptimizerType::kAdamw) {
    return {};
  }
  const ops::CpuBlas own = library_of(reference);
  std::vector<config::RunConfig> twins;
  for (ops::CpuBlas other : {ops::CpuBlas::kOneDnn, ops::CpuBlas::kBlis, ops::CpuBlas::kOpenBlas}) {
    if (other == own || !ops::cpu_blas_built(other)) continue;
    twins.push_back(reference);
    twins.back().device.blas = other;
  }
  // The sum over the step's tokens in another grouping: micro-batches halved (or doubled where the global batch
  // allows), the order a dp or cp layout sums the weight gradients in. The reference (single_rank_reference) gives
  // both batch sizes; a config without them gets no such twin.
  if (!reference.batch.global_batch_size || !reference.batch.micro_batch_size) return twins;
  const std::int64_t global = *reference.batch.global_batch_size, own_micro = *reference.batch.micro_batch_size;
  const std::int64_t micro = own_micro % 2 == 0 ? own_micro / 2 : global % (2 * own_micro) == 0 ? 2 * own_micro : 0;
  if (micro > 0) {
    twins.push_back(reference);
    twins.back().batch.micro_batch_size = micro;
    twins.back().batch.gradient_accumulation_steps.reset();
  }
  return twins;
}

RoundingFloor order_floor(std::span<const ParamComparison> pairs,
                          std::span<const std::string> described, double loss, double factor) {
  RoundingFloor f;
  f.order = true;
  f.twin = fmt::format("{}", fmt::join(described, " or "));
  f.factor = factor;
  f.loss = loss;
  for (const ParamComparison& c : pairs) {
    for (const ParamDifference& d : c.params) {
      double& m = f.max_abs[d.name];
      m = std::isnan(d.max_abs) || std::isnan(m) ? std::nan("") : std::max(m, d.max_abs);
    }
  }
  return f;
}

RoundingFloor rounding_floor(const ParamComparison& twin_against_reference, double loss, double factor) {
  RoundingFloor f;
  f.twin = "device.precision fp32 instead of bf16";
  f.factor = factor;
  f.loss = loss;
  for (const ParamDifference& d : twin_against_reference.params) f.max_abs[d.name] = d.max_abs;
  return f;
}

bool tensor_within(const ParamDifference& d, double param_tolerance, const NoiseFloor* floor,
                   const RoundingFloor* rounding) {
  if (d.normalised <= param_tolerance) return true;
  if (floor != nullptr && d.moved <= floor->tolerance()) return true;
  return rounding != nullptr && std::isfinite(rounding->tolerance(d.name)) && d.max_abs <= rounding->tolerance(d.name);
}

}  // namespace cleave::train

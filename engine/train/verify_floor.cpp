// See verify_floor.hpp.
#include "engine/train/verify_floor.hpp"

#include <fmt/format.h>

#include <cmath>

#include "engine/core/enum_names.hpp"
#include "kernels/ops/cpu_blas.hpp"

namespace cleave::train {
namespace {

// The library a run's GEMMs use (the bf16 kernels question does not change which library).
ops::CpuBlas library_of(const config::RunConfig& config) {
  return ops::choose_cpu_gemm(config.device.blas, false, ops::build_cpu_blas_facts(false)).library;
}

}  // namespace

std::optional<config::RunConfig> twin_reference(const config::RunConfig& reference) {
  if (reference.device.precision != ops::Precision::kBf16 || reference.device.type != DeviceType::kCpu) {
    return std::nullopt;
  }
  const ops::CpuBlas own = library_of(reference);
  ops::CpuBlas other = ops::CpuBlas::kOpenBlas;
  if (own == ops::CpuBlas::kOpenBlas) {
    if (ops::cpu_blas_built(ops::CpuBlas::kOneDnn)) {
      other = ops::CpuBlas::kOneDnn;
    } else if (ops::cpu_blas_built(ops::CpuBlas::kBlis)) {
      other = ops::CpuBlas::kBlis;
    } else {
      return std::nullopt;
    }
  }
  config::RunConfig twin = reference;
  twin.device.blas = other;
  twin.device.attention_sums = ops::AttentionSums::kReordered;
  return twin;
}

std::string describe_twin(const config::RunConfig& reference, const config::RunConfig& twin) {
  std::string out =
      fmt::format("device.blas {} instead of {}", enum_name(library_of(twin)), enum_name(library_of(reference)));
  if (twin.device.attention_sums != reference.device.attention_sums) {
    out += " and attention's sums reordered (f32 GEMM, key blocks halved)";
  }
  return out;
}

NoiseFloor noise_floor(const ParamComparison& twin_against_reference, double loss, std::string twin, double multiple) {
  NoiseFloor f;
  f.loss = loss;
  f.twin = std::move(twin);
  f.multiple = multiple;
  for (const ParamDifference& d : twin_against_reference.params) {
    if (d.moved > f.floor) {
      f.floor = d.moved;
      f.worst = d.name;
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

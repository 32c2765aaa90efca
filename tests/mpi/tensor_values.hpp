// Element access by value for tests that sweep every dtype: set(t, i, v) / get(t, i) through double.
#pragma once

#include <cstdint>

#include "engine/comm/host_reduce.hpp"
#include "engine/core/tensor.hpp"

namespace cleave::testing {

inline void set_value(const Tensor& t, std::int64_t i, double v) {
  switch (t.dtype()) {
    case DType::kF32: static_cast<float*>(t.raw_data())[i] = static_cast<float>(v); return;
    case DType::kBF16: static_cast<std::uint16_t*>(t.raw_data())[i] = float_to_bf16(static_cast<float>(v)); return;
    case DType::kF16: static_cast<std::uint16_t*>(t.raw_data())[i] = comm::float_to_f16(static_cast<float>(v)); return;
    case DType::kI32: static_cast<std::int32_t*>(t.raw_data())[i] = static_cast<std::int32_t>(v); return;
    case DType::kI64: static_cast<std::int64_t*>(t.raw_data())[i] = static_cast<std::int64_t>(v); return;
    case DType::kU16: static_cast<std::uint16_t*>(t.raw_data())[i] = static_cast<std::uint16_t>(v); return;
  }
}

inline double get_value(const Tensor& t, std::int64_t i) {
  switch (t.dtype()) {
    case DType::kF32: return static_cast<const float*>(t.raw_data())[i];
    case DType::kBF16: return bf16_to_float(static_cast<const std::uint16_t*>(t.raw_data())[i]);
    case DType::kF16: return comm::f16_to_float(static_cast<const std::uint16_t*>(t.raw_data())[i]);
    case DType::kI32: return static_cast<const std::int32_t*>(t.raw_data())[i];
    case DType::kI64: return static_cast<double>(static_cast<const std::int64_t*>(t.raw_data())[i]);
    case DType::kU16: return static_cast<const std::uint16_t*>(t.raw_data())[i];
  }
  return 0;
}

inline constexpr DType kAllDTypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kU16};

}  // namespace cleave::testing

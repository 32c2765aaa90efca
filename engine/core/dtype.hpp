// Element types a Tensor can hold, their sizes and names, and bf16/f16 conversion helpers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace cleave {

enum class DType : std::uint8_t { kF32, kBF16, kF16, kI32, kI64, kU16 };

std::size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);   // "f32", "bf16", ...
DType parse_dtype(std::string_view name);   // throws Error naming the allowed values

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::kF32; }
template <> constexpr DType dtype_of<std::int32_t>() { return DType::kI32; }
template <> constexpr DType dtype_of<std::int64_t>() { return DType::kI64; }
template <> constexpr DType dtype_of<std::uint16_t>() { return DType::kU16; }

// Round-to-nearest-even float -> bf16 bits, and back.
inline std::uint16_t float_to_bf16(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}
inline float bf16_to_float(std::uint16_t value) {
  std::uint32_t bits = static_cast<std::uint32_t>(value) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

}  // namespace cleave

// Host element loops for the communication backends (host_reduce.hpp).
#include "engine/comm/host_reduce.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "engine/core/error.hpp"
#include "engine/core/sum_tree.hpp"

namespace cleave::comm {
namespace {

constexpr std::int64_t kTile = 1024;

// Load element i of a slot as the accumulator type, and store it back.
template <typename Storage, typename Acc>
struct Codec {
  static Acc load(const void* p, std::int64_t i) { return static_cast<Acc>(static_cast<const Storage*>(p)[i]); }
  static void store(void* p, std::int64_t i, Acc v) { static_cast<Storage*>(p)[i] = static_cast<Storage>(v); }
};
struct Bf16Codec {
  static float load(const void* p, std::int64_t i) { return bf16_to_float(static_cast<const std::uint16_t*>(p)[i]); }
  static void store(void* p, std::int64_t i, float v) { static_cast<std::uint16_t*>(p)[i] = float_to_bf16(v); }
};
struct F16Codec {
  static float load(const void* p, std::int64_t i) { return f16_to_float(static_cast<const std::uint16_t*>(p)[i]); }
  static void store(void* p, std::int64_t i, float v) { static_cast<std::uint16_t*>(p)[i] = float_to_f16(v); }
};

template <typename Acc>
Acc combine(ReduceOp op, Acc acc, Acc v) {
  if (op == ReduceOp::kMax) {
    if constexpr (std::is_floating_point_v<Acc>) {
      if (std::isnan(acc)) return acc;
      return (v > acc || std::isnan(v)) ? v : acc;
    } else {
      return v > acc ? v : acc;
    }
  }
  if constexpr (std::is_integral_v<Acc>) {
    using U = std::make_unsigned_t<Acc>;
    return static_cast<Acc>(static_cast<U>(acc) + static_cast<U>(v));  // wraps like MPI_SUM, no UB
  } else {
    return acc + v;
  }
}

// acc[0..n) = canonical (sum_tree.hpp) combination of slots' elements [begin, begin + n). One tile of
// temporaries per tree level (depth <= log2 of the slot count).
template <typename Codec, typename Acc>
void tree_reduce_tile(ReduceOp op, std::span<const void* const> slots, std::int64_t begin, std::int64_t n, Acc* acc) {
  if (slots.size() == 1) {
    for (std::int64_t i = 0; i < n; ++i) acc[i] = Codec::load(slots[0], begin + i);
    return;
  }
  const auto left = static_cast<std::size_t>(sum_tree_left(static_cast<std::int64_t>(slots.size())));
  tree_reduce_tile<Codec, Acc>(op, slots.first(left), begin, n, acc);
  const auto right = slots.subspan(left);
  if (right.size() == 1) {
    for (std::int64_t i = 0; i < n; ++i) acc[i] = combine(op, acc[i], Codec::load(right[0], begin + i));
    return;
  }
  Acc partial[kTile];
  tree_reduce_tile<Codec, Acc>(op, right, begin, n, partial);
  for (std::int64_t i = 0; i < n; ++i) acc[i] = combine(op, acc[i], partial[i]);
}

template <typename Codec, typename Acc>
void ordered_reduce_typed(ReduceOp op, std::span<const void* const> slots, void* out, std::int64_t count) {
  Acc acc[kTile];
  for (std::int64_t begin = 0; begin < count; begin += kTile) {
    const std::int64_t n = std::min(kTile, count - begin);
    tree_reduce_tile<Codec, Acc>(op, slots, begin, n, acc);  // reads every slot's tile before `out` is written
    for (std::int64_t i = 0; i < n; ++i) Codec::store(out, begin + i, acc[i]);
  }
}

}  // namespace

float f16_to_float(std::uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, sizeof h);
  return static_cast<float>(h);
}

std::uint16_t float_to_f16(float value) {
  const _Float16 h = static_cast<_Float16>(value);
  std::uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

bool is_floating(DType dtype) { return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16; }

void widen_to_f32(const void* src, DType dtype, float* dst, std::int64_t count) {
  switch (dtype) {
    case DType::kF32: std::memcpy(dst, src, static_cast<std::size_t>(count) * sizeof(float)); return;
    case DType::kBF16: for (std::int64_t i = 0; i < count; ++i) dst[i] = Bf16Codec::load(src, i); return;
    case DType::kF16: for (std::int64_t i = 0; i < count; ++i) dst[i] = F16Codec::load(src, i); return;
    default: CLEAVE_ASSERT(false, "widen_to_f32 of {}", dtype_name(dtype));
  }
}

void narrow_from_f32(const float* src, DType dtype, void* dst, std::int64_t count) {
  switch (dtype) {
    case DType::kF32: std::memcpy(dst, src, static_cast<std::size_t>(count) * sizeof(float)); return;
    case DType::kBF16: for (std::int64_t i = 0; i < count; ++i) Bf16Codec::store(dst, i, src[i]); return;
    case DType::kF16: for (std::int64_t i = 0; i < count; ++i) F16Codec::store(dst, i, src[i]); return;
    default: CLEAVE_ASSERT(false, "narrow_from_f32 into {}", dtype_name(dtype));
  }
}

void ordered_reduce(DType dtype, ReduceOp op, std::span<const void* const> slots, void* out, std::int64_t count) {
  CLEAVE_ASSERT(!slots.empty(), "ordered_reduce with no inputs");
  switch (dtype) {
    case DType::kF32: return ordered_reduce_typed<Codec<float, float>, float>(op, slots, out, count);
    case DType::kBF16: return ordered_reduce_typed<Bf16Codec, float>(op, slots, out, count);
    case DType::kF16: return ordered_reduce_typed<F16Codec, float>(op, slots, out, count);
    case DType::kI32: return ordered_reduce_typed<Codec<std::int32_t, std::int32_t>, std::int32_t>(op, slots, out, count);
    case DType::kI64: return ordered_reduce_typed<Codec<std::int64_t, std::int64_t>, std::int64_t>(op, slots, out, count);
    case DType::kU16:
      return ordered_reduce_typed<Codec<std::uint16_t, std::uint16_t>, std::uint16_t>(op, slots, out, count);
  }
}

void scale_in_place(void* data, DType dtype, float factor, std::int64_t count) {
  switch (dtype) {
    case DType::kF32: {
      auto* p = static_cast<float*>(data);
      for (std::int64_t i = 0; i < count; ++i) p[i] *= factor;
      return;
    }
    case DType::kBF16: for (std::int64_t i = 0; i < count; ++i) Bf16Codec::store(data, i, Bf16Codec::load(data, i) * factor); return;
    case DType::kF16: for (std::int64_t i = 0; i < count; ++i) F16Codec::store(data, i, F16Codec::load(data, i) * factor); return;
    default: CLEAVE_THROW("scale_in_place: cannot scale a {} buffer (floating-point gradients only)", dtype_name(dtype));
  }
}

}  // namespace cleave::comm

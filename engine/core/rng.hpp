// Counter-based random numbers (Philox4x32-10), keyed by (seed, stream key, element index).
//
// Invariant: the value drawn for element i of a named parameter depends only on (seed, name, i), never on
// how many values were drawn before or on which rank draws it. A tensor-parallel shard therefore
// initialises itself as the exact slice of the logical tensor a single-rank run builds.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace cleave::rng {

// Stable 64-bit FNV-1a hash of a name (parameter names, "data", ...).
std::uint64_t hash_key(std::string_view name);

// Philox4x32-10 block for (seed, key) at counter `counter`.
std::array<std::uint32_t, 4> philox(std::uint64_t seed, std::uint64_t key, std::uint64_t counter);

// Uniform in [0, 1) and standard normal for element `index` of stream (seed, key).
float uniform(std::uint64_t seed, std::uint64_t key, std::uint64_t index);
float normal(std::uint64_t seed, std::uint64_t key, std::uint64_t index);
// A 64-bit integer draw (for shuffles and data sampling).
std::uint64_t bits64(std::uint64_t seed, std::uint64_t key, std::uint64_t index);

// Fill out[0..n) with mean + std * normal, element i drawing logical index first_index + i.
void fill_normal(float* out, std::int64_t n, std::uint64_t seed, std::uint64_t key, float mean, float std,
                 std::int64_t first_index = 0);
void fill_uniform(float* out, std::int64_t n, std::uint64_t seed, std::uint64_t key, float low, float high,
                  std::int64_t first_index = 0);

// Fill a [rows, cols] block that sits at (row0, col0) inside a logical [*, logical_cols] matrix: element
// (r, c) draws logical index (row0 + r) * logical_cols + (col0 + c). This is how a tensor-parallel shard
// reproduces its slice of the logical parameter.
void fill_normal_block(float* out, std::int64_t rows, std::int64_t cols, std::int64_t logical_cols,
                       std::int64_t row0, std::int64_t col0, std::uint64_t seed, std::uint64_t key, float mean,
                       float std);

}  // namespace cleave::rng

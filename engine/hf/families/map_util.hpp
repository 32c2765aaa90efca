// Helpers of the architectures' tensor maps (engine/hf/families/): one TensorMap row, a GPT-2 Conv1D, a
// LayerNorm. Internal to engine/hf.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/hf/hf_layout.hpp"

namespace cleave::hf::map_util {

using Dims = std::vector<std::int64_t>;

inline void add(std::vector<TensorMap>& out, std::string hf, Dims hf_shape, std::string cleave, Dims cleave_shape,
                Transform t = Transform::kCopy) {
  out.push_back({std::move(hf), std::move(hf_shape), std::move(cleave), std::move(cleave_shape), t});
}

// A Conv1D of GPT-2: weight stored [in, out] (transposed to Cleave's [out, in]), bias [out].
inline void add_conv1d(std::vector<TensorMap>& out, const std::string& hf, const std::string& cleave,
                       std::int64_t in, std::int64_t outs) {
  add(out, hf + ".weight", {in, outs}, cleave + ".weight", {outs, in}, Transform::kTranspose);
  add(out, hf + ".bias", {outs}, cleave + ".bias", {outs});
}

inline void add_layernorm(std::vector<TensorMap>& out, const std::string& hf, const std::string& cleave,
                          std::int64_t d) {
  add(out, hf + ".weight", {d}, cleave + ".weight", {d});
  add(out, hf + ".bias", {d}, cleave + ".bias", {d});
}

inline bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

}  // namespace cleave::hf::map_util

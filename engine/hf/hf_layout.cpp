// tensor_map and the transforms (hf_layout.hpp); each architecture's names are its row of the architecture
// table (hf_architecture.hpp, engine/hf/families/).
#include "engine/hf/hf_layout.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/core/error.hpp"
#include "engine/hf/hf_architecture.hpp"

namespace cleave::hf {
namespace {

std::vector<float> transpose(const std::vector<float>& in, std::int64_t rows, std::int64_t cols) {
  CLEAVE_ASSERT(static_cast<std::int64_t>(in.size()) == rows * cols, "transpose of {} elements as {}x{}", in.size(),
                rows, cols);
  std::vector<float> out(in.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c)
      out[static_cast<std::size_t>(c * rows + r)] = in[static_cast<std::size_t>(r * cols + c)];
  }
  return out;
}

}  // namespace

std::string_view architecture_class(Architecture a) { return hf_architecture(a).class_name; }

std::string_view architecture_model_type(Architecture a) { return hf_architecture(a).model_type; }

std::vector<TensorMap> tensor_map(const ModelDims& dims) {
  CLEAVE_ASSERT(dims.n_heads > 0 && dims.d_model % dims.n_heads == 0, "tensor_map: d_model {} over {} heads",
                dims.d_model, dims.n_heads);
  return hf_architecture(dims.architecture).tensor_map(dims);
}

bool is_hf_buffer(Architecture a, std::string_view name) { return hf_architecture(a).is_buffer(name); }

std::string shape_text(const std::vector<std::int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ",")); }

std::vector<float> to_cleave(const TensorMap& m, const std::vector<float>& in) {
  if (m.transform == Transform::kCopy) return in;
  return transpose(in, m.hf_shape[0], m.hf_shape[1]);
}

std::vector<float> to_hf(const TensorMap& m, const std::vector<float>& in) {
  if (m.transform == Transform::kCopy) return in;
  return transpose(in, m.cleave_shape[0], m.cleave_shape[1]);
}

}  // namespace cleave::hf

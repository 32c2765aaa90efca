// The Hugging Face architecture table (see hf_architecture.hpp): every row, listed once, explicitly.
#include "engine/hf/hf_architecture.hpp"

#include <array>

#include <fmt/format.h>

#include "engine/core/error.hpp"

namespace cleave::hf {
namespace {

const std::array<HfArchitecture, 8>& rows() {
  static const std::array<HfArchitecture, 8> table = [] {
    const std::array<HfArchitecture, 8> t = {gpt2_architecture(),    llama_architecture(), mistral_architecture(),
                                             qwen2_architecture(),   mixtral_architecture(), qwen3_architecture(),
                                             qwen3_moe_architecture(), qwen2_moe_architecture()};
    for (std::size_t i = 0; i < t.size(); ++i) {
      const HfArchitecture& a = t[i];
      CLEAVE_ASSERT(static_cast<std::size_t>(a.architecture) == i, "HF architecture table row {} is {}", i,
                    a.class_name);
      CLEAVE_ASSERT(a.read_config != nullptr && a.model_dims != nullptr && a.holds != nullptr &&
                        a.write_config != nullptr && !a.keys.empty() &&
                        a.tensor_map != nullptr && a.is_buffer != nullptr && a.canonical_name != nullptr,
                    "HF architecture {} leaves a function unset", a.class_name);
    }
    return t;
  }();  // immutable after the first call
  return table;
}

}  // namespace

const HfArchitecture& hf_architecture(Architecture a) {
  const auto index = static_cast<std::size_t>(a);
  CLEAVE_ASSERT(index < rows().size(), "architecture {} has no row in the HF architecture table", index);
  return rows()[index];
}

std::span<const HfArchitecture> hf_architectures() { return rows(); }

std::string hf_class_names() {
  std::string out;
  for (std::size_t i = 0; i < rows().size(); ++i) {
    if (i > 0) out += i + 1 == rows().size() ? " and " : ", ";
    out += rows()[i].class_name;
  }
  return out;
}

std::string hf_export_names() {
  std::string out;
  for (std::size_t i = 0; i < rows().size(); ++i) {
    if (i > 0) out += ", ";
    out += fmt::format("{} {} {}", rows()[i].cleave_type, i == 0 ? "exports as" : "as", rows()[i].class_name);
    out += rows()[i].export_note;
  }
  return out;
}

}  // namespace cleave::hf

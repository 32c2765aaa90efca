// See checkpoint_arg.hpp.
#include "engine/cli/checkpoint_arg.hpp"

#include <filesystem>

#include "engine/core/error.hpp"
#include "engine/hf/hf_import.hpp"

namespace cleave::cli {

checkpoint::ReadSource checkpoint_read_source(std::string_view command, const std::string& source,
                                              const std::string& hf_refusal) {
  if (!std::filesystem::exists(std::filesystem::path(source) / "index.json")) {
    CLEAVE_CHECK(!hf::is_hf_dir(source), "{}", hf_refusal);
  }
  const auto target = checkpoint::resolve_read_source(source);
  CLEAVE_CHECK(target.has_value(), "{}: {} is not a checkpoint (no index.json, no step_NNNNNNN/)", command, source);
  return *target;
}

}  // namespace cleave::cli

// See checkpoint_arg.hpp.
#include "engine/cli/checkpoint_arg.hpp"

#include <filesystem>

#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/hf/hf_import.hpp"

namespace cleave::cli {

checkpoint::ReadSource checkpoint_read_source(std::string_view command, const std::string& source,
                                              const std::string& hf_refusal) {
  if (!std::filesystem::exists(std::filesystem::path(source) / "index.json")) {
    CLEAVE_CHECK_INPUT(!hf::is_hf_dir(source), "{}", hf_refusal);
  }
  const auto target = checkpoint::resolve_read_source(source);
  const bool run_dir = std::filesystem::is_directory(std::filesystem::path(source) / "checkpoints");
  CLEAVE_CHECK_INPUT(target.has_value(), "{}: {} is not a checkpoint (no index.json, no step_NNNNNNN/){}", command,
                     source,
                     run_dir ? fmt::format("; a run directory keeps its checkpoints in {}",
                                           (std::filesystem::path(source) / "checkpoints").string())
                             : std::string());
  return *target;
}

}  // namespace cleave::cli

// See checkpoint_arg.hpp.
#include "engine/cli/checkpoint_arg.hpp"

#include <filesystem>

#include "engine/checkpoint/checkpoint_dir.hpp"
#include "engine/core/error.hpp"
#include "engine/hf/hf_import.hpp"

namespace cleave::cli {

std::string checkpoint_step_dir(std::string_view command, const std::string& source, const std::string& hf_refusal) {
  if (std::filesystem::exists(std::filesystem::path(source) / "index.json")) return source;
  CLEAVE_CHECK(!hf::is_hf_dir(source), "{}", hf_refusal);
  const auto latest = checkpoint::latest_step_dir(source);
  CLEAVE_CHECK(latest.has_value(), "{}: {} is not a checkpoint (no index.json, no complete step_NNNNNNN/)", command,
               source);
  return *latest;
}

}  // namespace cleave::cli

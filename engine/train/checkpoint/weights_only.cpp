// write_weights_checkpoint (weights_only.hpp).
#include "engine/train/checkpoint/weights_only.hpp"

#include <filesystem>

#include "engine/checkpoint/checkpoint_dir.hpp"
#include "engine/checkpoint/checkpoint_index.hpp"
#include "engine/checkpoint/checksum.hpp"
#include "engine/checkpoint/safetensors.hpp"
#include "engine/core/error.hpp"

namespace cleave::train {

using nlohmann::json;
namespace fs = std::filesystem;

WeightsOnlyStats write_weights_checkpoint(const std::string& root, const json& model,
                                          const std::map<std::string, std::vector<float>>& tensors,
                                          const std::map<std::string, std::vector<std::int64_t>>& shapes,
                                          const json& source) {
  CLEAVE_CHECK(!fs::exists(root), "{} already exists; nothing was written (remove it or choose another --out)", root);
  constexpr const char* kFile = "weights.safetensors";
  std::vector<checkpoint::TensorToWrite> out;
  json entries = json::object();
  for (const auto& [name, values] : tensors) {
    const auto numel = static_cast<std::int64_t>(values.size());
    out.push_back({name, "F32", {numel}, std::as_bytes(std::span<const float>(values))});
    entries[name] = {{"kind", "parameter"},
                     {"shape", shapes.at(name)},
                     {"dtype", "F32"},
                     {"pieces", json::array({{{"file", kFile}, {"name", name}, {"dim", -1}, {"parts", 1},
                                              {"index", 0}, {"groups", 1}, {"begin", 0}, {"end", numel}}})}};
  }
  WeightsOnlyStats stats;
  try {
    const std::string tmp = checkpoint::begin_step_dir(root, 0);
    const checkpoint::WrittenFile written = checkpoint::write_safetensors(
        (fs::path(tmp) / kFile).string(), out, {{"format", "cleave-checkpoint"}, {"weights_only", "true"}});
    json index = {
        {"format", "cleave-checkpoint"},
        {"version", checkpoint::kCheckpointFormatVersion},
        {"step", 0},
        {"consumed_samples", 0},
        {"weights_only", true},
        {"source", source},
        {"model", model},
        {"optimizer", {{"type", "none"}, {"steps_done", 0}}},
        {"files", {{kFile, {{"bytes", written.bytes}, {"checksum", checkpoint::checksum_text(written.checksum)}}}}},
        {"tensors", entries}};
    checkpoint::seal_index(index);
    const std::string text = index.dump(1) + "\n";
    checkpoint::write_file_durable((fs::path(tmp) / "index.json").string(), text);
    stats.path = checkpoint::commit_step_dir(root, 0);
    stats.bytes = written.bytes + static_cast<std::int64_t>(text.size());
    stats.tensors = static_cast<int>(out.size());
  } catch (const std::exception& e) {
    std::error_code ignored;
    fs::remove_all(root, ignored);  // it did not exist before
    CLEAVE_THROW("writing the checkpoint {} failed, nothing was left there: {}", root, e.what());
  }
  return stats;
}

bool is_weights_only(const json& index) {
  auto it = index.find("weights_only");
  return it != index.end() && it->is_boolean() && it->get<bool>();
}

}  // namespace cleave::train

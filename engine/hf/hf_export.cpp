// write_hf_checkpoint (hf_export.hpp).
#include "engine/hf/hf_export.hpp"

#include <unistd.h>

#include <filesystem>

#include <fmt/format.h>

#include "engine/checkpoint/checkpoint_dir.hpp"
#include "engine/checkpoint/safetensors.hpp"
#include "engine/core/dtype.hpp"
#include "engine/core/error.hpp"
#include "engine/hf/hf_config.hpp"
#include "engine/hf/hf_import.hpp"
#include "engine/hf/hf_layout.hpp"

namespace cleave::hf {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

struct Converted {
  const TensorMap* map = nullptr;
  std::vector<float> f32;             // HF order
  std::vector<std::uint16_t> bf16;    // when exporting bf16
  std::span<const std::byte> bytes() const {
    return bf16.empty() ? std::as_bytes(std::span<const float>(f32))
                        : std::as_bytes(std::span<const std::uint16_t>(bf16));
  }
};

// Consecutive tensors grouped into files of at most `limit` bytes (0: one group).
std::vector<std::vector<const Converted*>> shard(const std::vector<Converted>& tensors, std::int64_t limit) {
  std::vector<std::vector<const Converted*>> out(1);
  std::int64_t size = 0;
  for (const Converted& t : tensors) {
    const auto bytes = static_cast<std::int64_t>(t.bytes().size());
    if (limit > 0 && !out.back().empty() && size + bytes > limit) {
      out.emplace_back();
      size = 0;
    }
    out.back().push_back(&t);
    size += bytes;
  }
  return out;
}

HfExportStats write_into(const fs::path& tmp, const json& model, const std::vector<Converted>& tensors,
                         const HfExportOptions& options) {
  HfExportStats stats;
  const auto groups = shard(tensors, options.max_shard_bytes);
  json weight_map = json::object();
  std::int64_t total = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const std::string file = groups.size() == 1
                                 ? std::string("model.safetensors")
                                 : fmt::format("model-{:05d}-of-{:05d}.safetensors", g + 1, groups.size());
    std::vector<checkpoint::TensorToWrite> out;
    for (const Converted* t : groups[g]) {
      out.push_back({t->map->hf_name, options.bf16 ? "BF16" : "F32", t->map->hf_shape, t->bytes()});
      weight_map[t->map->hf_name] = file;
      total += static_cast<std::int64_t>(t->bytes().size());
    }
    stats.bytes += checkpoint::write_safetensors((tmp / file).string(), out, {{"format", "pt"}}).bytes;
    ++stats.files;
    stats.tensors += static_cast<int>(out.size());
  }
  if (groups.size() > 1) {
    const std::string index = json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2) + "\n";
    checkpoint::write_file_durable((tmp / "model.safetensors.index.json").string(), index);
    stats.bytes += static_cast<std::int64_t>(index.size());
  }
  const json source_config = options.source.is_object() ? options.source.value("config", json()) : json();
  const json config_doc = hf_config_json(model, options.bf16 ? "bfloat16" : "float32", source_config);
  // What transformers will read back must be this model: the same sizes and settings as a fresh export's.
  const HfModelConfig back = read_hf_config(config_doc, "the exported config.json");
  const HfModelConfig fresh = read_hf_config(hf_config_json(model, "float32"), "export: config.json");
  CLEAVE_ASSERT(back.model == fresh.model, "export: config.json from the source reads as {}, the model is {}",
                back.model.dump(), fresh.model.dump());
  stats.architecture = std::string(architecture_class(back.dims.architecture));
  stats.notes = back.notes;
  const std::string config = config_doc.dump(2) + "\n";
  checkpoint::write_file_durable((tmp / "config.json").string(), config);
  stats.bytes += static_cast<std::int64_t>(config.size());
  // generation_config.json: the source's, else the token ids config.json carries (as save_pretrained does).
  json generation = options.source.is_object() ? options.source.value("generation_config", json()) : json();
  if (!generation.is_object()) {
    generation = {{"_from_model_config", true}};
    for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
      if (config_doc.contains(key) && !config_doc.at(key).is_null()) generation[key] = config_doc.at(key);
    }
  }
  const std::string generation_text = generation.dump(2) + "\n";
  checkpoint::write_file_durable((tmp / "generation_config.json").string(), generation_text);
  stats.bytes += static_cast<std::int64_t>(generation_text.size());
  // The tokenizer files, from the directory the model was imported from.
  const std::string source_dir = options.source.is_object() ? options.source.value("path", "") : "";
  if (!source_dir.empty()) {
    for (const char* name : kTokenizerFiles) {
      const fs::path from = fs::path(source_dir) / name;
      if (!fs::is_regular_file(from)) continue;
      fs::copy_file(from, tmp / name);
      stats.bytes += static_cast<std::int64_t>(fs::file_size(from));
      stats.tokenizer_files.push_back(name);
    }
    if (stats.tokenizer_files.empty()) {
      stats.notes.push_back(fmt::format("no tokenizer files written: the source directory {} {}", source_dir,
                                        fs::is_directory(source_dir) ? "has none" : "is gone"));
    }
  }
  return stats;
}

}  // namespace

HfExportStats write_hf_checkpoint(const std::string& dir, const json& model,
                                  const std::function<std::vector<float>(const std::string&)>& tensor,
                                  const HfExportOptions& options) {
  CLEAVE_CHECK(!fs::exists(dir), "export: {} already exists; nothing was written (remove it or choose another --out)",
               dir);
  std::string preferred;
  if (options.source.is_object()) preferred = options.source.value("architecture", "");
  const ModelDims dims = dims_of_model(model, "export", preferred);
  const std::vector<TensorMap> maps = tensor_map(dims);
  std::vector<Converted> tensors;
  tensors.reserve(maps.size());
  std::string stacked_name;  // the stacked expert tensor the sliced rows read (fetched once for its E rows)
  std::vector<float> stacked;
  for (const TensorMap& m : maps) {
    std::int64_t numel = 1;
    for (std::int64_t e : m.hf_shape) numel *= e;
    std::vector<float> values;
    if (m.slice < 0) {
      values = tensor(m.cleave_name);
      CLEAVE_CHECK(static_cast<std::int64_t>(values.size()) == numel,
                   "export: tensor {} has {} elements, but the model section gives it shape {}", m.cleave_name,
                   values.size(), shape_text(m.cleave_shape));
    } else {
      if (stacked_name != m.cleave_name) {
        stacked = tensor(m.cleave_name);
        stacked_name = m.cleave_name;
        std::int64_t whole = 1;
        for (std::int64_t e : m.cleave_shape) whole *= e;
        CLEAVE_CHECK(static_cast<std::int64_t>(stacked.size()) == whole,
                     "export: tensor {} has {} elements, but the model section gives it shape {}", m.cleave_name,
                     stacked.size(), shape_text(m.cleave_shape));
      }
      const auto begin = stacked.begin() + static_cast<std::ptrdiff_t>(m.slice * numel);
      values.assign(begin, begin + static_cast<std::ptrdiff_t>(numel));
    }
    Converted c{&m, to_hf(m, values), {}};
    if (options.bf16) {
      c.bf16.reserve(c.f32.size());
      for (float v : c.f32) c.bf16.push_back(float_to_bf16(v));
    }
    tensors.push_back(std::move(c));
  }
  fs::path final_path = fs::path(dir).lexically_normal();
  if (final_path.filename().empty()) final_path = final_path.parent_path();  // "out/"
  const fs::path tmp =
      final_path.parent_path() / fmt::format(".{}.partial-{}", final_path.filename().string(), ::getpid());
  fs::remove_all(tmp);
  try {
    fs::create_directories(tmp);
    const HfExportStats stats = write_into(tmp, model, tensors, options);
    fs::rename(tmp, final_path);
    return stats;
  } catch (const std::exception& e) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    CLEAVE_THROW("export: writing {} failed, nothing was left there: {}", dir, e.what());
  }
}

}  // namespace cleave::hf

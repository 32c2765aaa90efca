// read_hf_checkpoint (hf_import.hpp).
#include "engine/hf/hf_import.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "engine/checkpoint/safetensors.hpp"
#include "engine/hf/hf_architecture.hpp"
#include "engine/comm/host_reduce.hpp"
#include "engine/core/error.hpp"
#include "engine/core/one_line.hpp"

namespace cleave::hf {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

json read_json(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  CLEAVE_CHECK(in.good(), "{}: cannot open for reading", path.string());
  std::stringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::exception& e) {
    CLEAVE_THROW("{}: not valid JSON ({})", path.string(), e.what());
  }
}

// "a, b, c and 4 more".
std::string some_names(const std::vector<std::string>& names) {
  const std::size_t shown = std::min<std::size_t>(names.size(), 3);
  std::string out =
      fmt::format("{}", fmt::join(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(shown), ", "));
  if (names.size() > shown) out += fmt::format(" and {} more", names.size() - shown);
  return out;
}

// The safetensors files of the directory and, with an index, the file each tensor must be in.
struct Files {
  std::vector<std::string> names;
  std::map<std::string, std::string> weight_map;  // empty without an index
};

Files list_files(const fs::path& dir) {
  Files out;
  const fs::path index = dir / kIndexFile;
  if (!fs::exists(index)) {
    CLEAVE_CHECK(fs::exists(dir / kSingleFile),
                 "{}: neither {} nor {} (only safetensors weights are read; re-save a pytorch_model.bin with "
                 "save_pretrained(..., safe_serialization=True))",
                 dir.string(), kSingleFile, kIndexFile);
    out.names.push_back(kSingleFile);
    return out;
  }
  const json doc = read_json(index);
  auto map = doc.find("weight_map");
  CLEAVE_CHECK(doc.is_object() && map != doc.end() && map->is_object() && !map->empty(),
               "{}: expected {{\"weight_map\": {{tensor: file, ...}}}}", index.string());
  std::set<std::string> files;
  for (const auto& [tensor, file] : map->items()) {
    CLEAVE_CHECK(file.is_string(), "{}: weight_map[\"{}\"] must be a file name, got {}", index.string(), tensor,
                 file.dump());
    const std::string name = file.get<std::string>();
    CLEAVE_CHECK(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..",
                 "{}: weight_map[\"{}\"] = \"{}\" is not a plain file name in the directory", index.string(), tensor,
                 name);
    CLEAVE_CHECK(fs::exists(dir / name), "{}: shard {} is missing (the index puts {} in it)", dir.string(), name,
                 tensor);
    out.weight_map[tensor] = name;
    files.insert(name);
  }
  out.names.assign(files.begin(), files.end());
  return out;
}

std::vector<float> to_f32(const checkpoint::SafetensorsFile& file, const std::string& name) {
  const checkpoint::TensorRecord& record = file.record(name);
  const auto bytes = file.bytes(name);
  DType dtype = DType::kF32;
  if (record.dtype == "BF16") dtype = DType::kBF16;
  else if (record.dtype == "F16") dtype = DType::kF16;
  else CLEAVE_CHECK(record.dtype == "F32", "{}: tensor {} is {} (weights are read as F32, BF16 or F16)", file.path,
                    name, record.dtype);
  const std::int64_t count = static_cast<std::int64_t>(bytes.size() / checkpoint::safetensors_dtype_size(record.dtype));
  std::vector<float> out(static_cast<std::size_t>(count));
  comm::widen_to_f32(bytes.data(), dtype, out.data(), count);
  return out;
}

// The name as the tensor map spells it (GPT-2: a GPT2Model's state dict has no "transformer." prefix).
std::string canonical_name(Architecture a, const std::string& name) { return hf_architecture(a).canonical_name(name); }

// What the safetensors files hold, by canonical HF name: the expected tensors' values (HF order), the names no
// Cleave parameter takes, and a tied model's stray lm_head.weight (checked against the embedding afterwards).
struct HfTensors {
  std::map<std::string, std::vector<float>> values;
  std::vector<std::string> unknown;
  std::vector<float> stray_head;
  std::string stray_head_file;
};

// Every tensor of every file in `dir` (each where the index's weight_map puts it, each expected one of the shape
// config.json's sizes give, none twice); `read_files` collects the files read.
HfTensors read_tensors(const fs::path& dir, const std::string& dir_text, const Files& files, const ModelDims& dims,
                       const std::map<std::string, TensorMap>& expected, std::vector<std::string>& read_files) {
  const Architecture arch = dims.architecture;
  HfTensors t;
  for (const std::string& file_name : files.names) {
    const checkpoint::SafetensorsFile file = checkpoint::read_safetensors((dir / file_name).string());
    read_files.push_back(file.path);
    for (const auto& [stored, record] : file.tensors) {
      if (!files.weight_map.empty()) {
        auto listed = files.weight_map.find(stored);
        CLEAVE_CHECK(listed != files.weight_map.end(), "{}: tensor {} is not in {}'s weight_map", file.path, stored,
                     kIndexFile);
        CLEAVE_CHECK(listed->second == file_name, "{}: tensor {} is here, but {} puts it in {}", file.path, stored,
                     kIndexFile, listed->second);
      }
      const std::string name = canonical_name(arch, stored);
      if (is_hf_buffer(arch, name)) continue;
      if (name == "lm_head.weight" && dims.tied) {
        t.stray_head = to_f32(file, stored);
        t.stray_head_file = file.path;
        continue;
      }
      auto it = expected.find(name);
      if (it == expected.end()) {
        t.unknown.push_back(stored);
        continue;
      }
      CLEAVE_CHECK(record.shape == it->second.hf_shape,
                   "{}: tensor {} has shape {}, but config.json's sizes give {} (Cleave {} {})", file.path, stored,
                   shape_text(record.shape), shape_text(it->second.hf_shape), it->second.cleave_name,
                   shape_text(it->second.cleave_shape));
      CLEAVE_CHECK(t.values.count(name) == 0, "{}: tensor {} appears in two files", dir_text, name);
      t.values.emplace(name, to_f32(file, stored));
    }
  }
  return t;
}

// No unknown tensor, none missing, and a tied model's stray lm_head.weight equal to the embedding.
void check_tensor_set(const std::string& dir_text, Architecture arch, const std::map<std::string, TensorMap>& expected,
                      const HfTensors& t) {
  CLEAVE_CHECK(t.unknown.empty(), "{}: unknown tensor{} {} for {} (no Cleave parameter takes {})", dir_text,
               t.unknown.size() == 1 ? "" : "s", some_names(t.unknown), architecture_class(arch),
               t.unknown.size() == 1 ? "it" : "them");
  std::vector<std::string> missing;
  for (const auto& [name, m] : expected) {
    if (t.values.count(name) == 0) missing.push_back(name);
  }
  CLEAVE_CHECK(missing.empty(), "{}: missing tensor{} {} (config.json's {} needs {})", dir_text,
               missing.size() == 1 ? "" : "s", some_names(missing), architecture_class(arch),
               missing.size() == 1 ? "it" : "them");
  if (!t.stray_head.empty()) {
    const std::string embed(hf_architecture(arch).embedding);
    const std::vector<float>& table = t.values.at(embed);
    CLEAVE_CHECK(t.stray_head.size() == table.size() &&
                     std::memcmp(t.stray_head.data(), table.data(), table.size() * sizeof(float)) == 0,
                 "{}: lm_head.weight differs from {} although tie_word_embeddings is true; set it false in "
                 "config.json to import an untied head",
                 t.stray_head_file, embed);
  }
}

// Each expected tensor in Cleave's layout under its Cleave name; an expert's slice into its stacked [E, ...] tensor.
void place_cleave_tensors(const std::map<std::string, TensorMap>& expected,
                          const std::map<std::string, std::vector<float>>& hf_values, HfCheckpoint& out) {
  for (const auto& [name, m] : expected) {
    std::vector<float> values = to_cleave(m, hf_values.at(name));
    out.shapes[m.cleave_name] = m.cleave_shape;
    if (m.slice < 0) {
      out.tensors[m.cleave_name] = std::move(values);
      continue;
    }
    // One expert of a stacked [E, ...] tensor: its rows at slice · (its size).
    std::int64_t whole = 1;
    for (std::int64_t e : m.cleave_shape) whole *= e;
    std::vector<float>& stacked = out.tensors[m.cleave_name];
    if (stacked.empty()) stacked.assign(static_cast<std::size_t>(whole), 0.0f);
    const std::size_t offset = static_cast<std::size_t>(m.slice) * values.size();
    CLEAVE_ASSERT(offset + values.size() <= stacked.size(), "slice {} of {} ({} elements) past its {} elements",
                  m.slice, m.cleave_name, values.size(), stacked.size());
    std::copy(values.begin(), values.end(), stacked.begin() + static_cast<std::ptrdiff_t>(offset));
  }
}

// config.json and generation_config.json: an HfCheckpoint without tensors.
HfCheckpoint read_config_files(const std::string& dir_text) {
  const fs::path dir(dir_text);
  CLEAVE_CHECK(fs::is_directory(dir), "{}: no such directory", dir_text);
  const fs::path config_path = dir / "config.json";
  CLEAVE_CHECK(fs::exists(config_path), "{}: no config.json (not a Hugging Face model directory)", dir_text);
  HfCheckpoint out;
  out.source_config = read_json(config_path);
  out.config = read_hf_config(out.source_config, config_path.string());
  if (const fs::path generation = dir / "generation_config.json"; fs::exists(generation)) {
    out.generation_config = read_json(generation);
  }
  return out;
}

HfCheckpoint read(const std::string& dir_text) {
  const fs::path dir(dir_text);
  HfCheckpoint out = read_config_files(dir_text);
  const Files files = list_files(dir);
  std::map<std::string, TensorMap> expected;
  for (TensorMap& m : tensor_map(out.config.dims)) expected.emplace(m.hf_name, std::move(m));
  const HfTensors tensors = read_tensors(dir, dir_text, files, out.config.dims, expected, out.files);
  check_tensor_set(dir_text, out.config.dims.architecture, expected, tensors);
  place_cleave_tensors(expected, tensors.values, out);
  return out;
}

}  // namespace

bool is_hf_dir(const std::string& dir) {
  const fs::path config = fs::path(dir) / "config.json";
  if (!fs::exists(config) || fs::exists(fs::path(dir) / "index.json")) return false;
  // A Cleave run directory holds a config.json too (the resolved run config), without these keys.
  std::ifstream in(config, std::ios::binary);
  const json doc = json::parse(in, nullptr, /*allow_exceptions=*/false);
  return doc.is_object() && (doc.contains("architectures") || doc.contains("model_type"));
}

json hf_source_record(const std::string& dir, const HfCheckpoint& checkpoint) {
  json out = {{"format", "huggingface"},
              {"architecture", std::string(architecture_class(checkpoint.config.dims.architecture))},
              {"path", fs::absolute(dir).lexically_normal().string()},
              {"config", checkpoint.source_config}};
  if (!checkpoint.generation_config.is_null()) out["generation_config"] = checkpoint.generation_config;
  return out;
}

HfCheckpoint read_hf_checkpoint(const std::string& dir) {
  try {
    return read(dir);
  } catch (const Error& e) {
    rethrow_one_line(e);  // names quoted from the files may hold control characters
  }
}

HfCheckpoint read_hf_config_files(const std::string& dir) {
  try {
    return read_config_files(dir);
  } catch (const Error& e) {
    rethrow_one_line(e);
  }
}

}  // namespace cleave::hf

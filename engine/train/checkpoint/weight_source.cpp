// open_weight_source, config_for_init, load_weights (weight_source.hpp).
#include "engine/train/checkpoint/weight_source.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>

#include "engine/checkpoint/checkpoint_damage.hpp"
#include "engine/checkpoint/checkpoint_dir.hpp"
#include "engine/config/input_paths.hpp"
#include "engine/config/model_training_keys.hpp"
#include "engine/core/english.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/hf/hf_import.hpp"
#include "engine/train/checkpoint/checkpoint_pieces.hpp"
#include "engine/train/checkpoint/checkpoint_reader.hpp"
#include "engine/train/checkpoint/finite_weights.hpp"
#include "engine/train/rank_model.hpp"
#include "engine/train/rank_setup.hpp"
#include "kernels/ops/ops.hpp"
#include "layers/layer_util.hpp"
#include "layers/parallel/shard.hpp"

namespace cleave::train {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// The learned position table (gpt's embed.position [positions, d_model]) of a run at a shorter seq_len.
constexpr const char* kPositionTable = "embed.position";
bool is_sliced_positions(const std::string& name, const std::vector<std::int64_t>& have,
                         const std::vector<std::int64_t>& want) {
  return name == kPositionTable && have.size() == 2 && want.size() == 2 && have[1] == want[1] && want[0] < have[0];
}
std::vector<float> first_rows(const std::vector<float>& values, const std::vector<std::int64_t>& have,
                              const std::vector<std::int64_t>& want) {
  CLEAVE_ASSERT(static_cast<std::int64_t>(values.size()) == have[0] * have[1], "position table of {} values", values.size());
  return {values.begin(), values.begin() + static_cast<std::ptrdiff_t>(want[0] * want[1])};
}

// A Hugging Face directory's model keys, origin and record (its tensors, if read, are the caller's to hand out).
WeightSource hf_described(const std::string& dir, const hf::HfCheckpoint& checkpoint) {
  WeightSource out;
  out.origin = fmt::format("Hugging Face {} in {}", hf::architecture_class(checkpoint.config.dims.architecture), dir);
  out.model_origin = (fs::path(dir) / "config.json").string();
  out.model = checkpoint.config.model;
  out.source = hf::hf_source_record(dir, checkpoint);
  out.notes = checkpoint.config.notes;
  return out;
}

WeightSource hf_source(const std::string& dir) {
  auto weights = std::make_shared<hf::HfCheckpoint>(hf::read_hf_checkpoint(dir));
  WeightSource out = hf_described(dir, *weights);
  out.tensor = [weights, dir](const std::string& name, const std::vector<std::int64_t>& shape) {
    auto it = weights->tensors.find(name);
    CLEAVE_CHECK(it != weights->tensors.end(), "--init-from {}: holds no tensor for Cleave's {} (this model needs it)",
                 dir, name);
    const std::vector<std::int64_t>& have = weights->shapes.at(name);
    if (is_sliced_positions(name, have, shape)) return first_rows(it->second, have, shape);
    CLEAVE_CHECK(have == shape, "--init-from {}: {} has shape {}, this model's is {}", dir, name, hf::shape_text(have),
                 hf::shape_text(shape));
    return it->second;
  };
  return out;
}

// The model keys and record of a Hugging Face directory, without its tensors (open_weight_source_model).
WeightSource hf_model_source(const std::string& dir) { return hf_described(dir, hf::read_hf_config_files(dir)); }

WeightSource checkpoint_source(const std::string& path) {
  std::string dir = path;
  if (!fs::exists(fs::path(path) / "index.json")) {
    const auto latest = checkpoint::latest_step_dir(path);
    const bool run_dir = fs::is_directory(fs::path(path) / "checkpoints");
    if (!latest) {
      // A Hugging Face directory whose config.json does not parse is that, not "neither": say which file.
      const fs::path config = fs::path(path) / "config.json";
      std::string parse_error;
      if (fs::is_regular_file(config)) {
        try {
          std::ifstream in(config, std::ios::binary);
          const json parsed = json::parse(in);  // only whether it parses matters here
          (void)parsed;
        } catch (const json::exception& e) {
          parse_error = e.what();
        }
      }
      CLEAVE_CHECK(parse_error.empty(),
                   "--init-from {}: {} is not valid JSON ({}); a Hugging Face model directory needs a config.json "
                   "naming architectures or model_type: restore it (e.g. download it again)",
                   path, config.string(), parse_error);
    }
    CLEAVE_CHECK(latest.has_value(),
                 "--init-from {}: neither a Hugging Face model directory (a config.json naming architectures or "
                 "model_type) nor a Cleave checkpoint (no index.json, no complete step_NNNNNNN/){}",
                 path, run_dir ? fmt::format("; a run directory keeps its checkpoints in {}/checkpoints", path) : "");
    dir = *latest;
  }
  auto reader = std::make_shared<CheckpointReader>(dir);
  reader->check_files();  // every file's size and header before a tensor is read
  WeightSource out;
  out.origin = "checkpoint " + dir;
  out.model_origin = (fs::path(dir) / "index.json").string();
  out.model = reader->index().at("model");
  out.source = reader->index().value("source", json());
  out.tensor = [reader](const std::string& name, const std::vector<std::int64_t>& shape) {
    if (name == kPositionTable) {
      const std::vector<std::int64_t> have = reader->shape_of(name);
      if (is_sliced_positions(name, have, shape)) return first_rows(reader->logical(name, &have), have, shape);
    }
    return reader->logical(name, &shape);
  };
  return out;
}

json read_config_json(const std::string& path) {
  if (path.empty()) return json::object();
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
}

}  // namespace

std::int64_t max_seq_len_of(const WeightSource& source) {
  const json& m = source.model;
  if (m.contains("max_seq_len") && m.at("max_seq_len").is_number_integer()) return m.at("max_seq_len").get<std::int64_t>();
  return m.value("seq_len", std::int64_t{0});
}

std::string describe_context(const WeightSource& source, const config::RunConfig& config) {
  const std::int64_t seq = config::token_seq_len(config.model), max = max_seq_len_of(source);
  // gpt: a learned table; llama and moe (rotary positions, max_seq_len): nothing to slice.
  const bool learned = !source.model.contains("max_seq_len") && source.model.value("type", "gpt") == "gpt";
  std::string how;
  if (learned) {
    how = seq < max ? fmt::format("learned position table sliced to its first {} of {} rows", seq, max)
                    : "the whole learned position table";
  } else {
    how = "rotary positions: nothing sliced";
  }
  return fmt::format("seq_len {} of at most {} ({})", seq, max, how);
}

// A directory that is neither, or a Hugging Face directory whose files do not agree (a missing or unknown tensor, a
// shape config.json does not give, a missing shard): bad input (reading_input), so `cleave run` does not restart
// into it. A Cleave checkpoint's damage keeps its own type.
WeightSource open_weight_source(const std::string& path) {
  CLEAVE_CHECK_INPUT(fs::is_directory(path), "--init-from {}: no such directory", path);
  return reading_input([&] { return hf::is_hf_dir(path) ? hf_source(path) : checkpoint_source(path); });
}

WeightSource open_weight_source_model(const std::string& path) {
  CLEAVE_CHECK_INPUT(fs::is_directory(path), "--init-from {}: no such directory", path);
  // A checkpoint's tensors: on demand.
  return reading_input([&] { return hf::is_hf_dir(path) ? hf_model_source(path) : checkpoint_source(path); });
}

namespace {

// The model keys CONFIG (its parsed `root`) or a --set gives.
std::set<std::string> given_model_keys(const json& root, const std::vector<std::string>& overrides) {
  std::set<std::string> given;
  if (auto m = root.find("model"); m != root.end() && m->is_object()) {
    for (const auto& [key, value] : m->items()) given.insert(key);
  }
  for (const std::string& assignment : overrides) {
    const std::string key = assignment.substr(0, assignment.find('='));
    if (key.rfind("model.", 0) == 0) given.insert(key.substr(6));
  }
  return given;
}

std::string config_name(const std::string& config_path) { return config_path.empty() ? "the config" : config_path; }

// Another model type than the weights' is refused first: its keys would otherwise be reported as foreign to the
// weights' type. `model`: CONFIG's model section; a --set model.type wins over it.
void check_model_type(const json& model, const std::vector<std::string>& overrides, const WeightSource& source,
                      const std::string& config_path) {
  std::string type = model.contains("type") && model.at("type").is_string() ? model.at("type").get<std::string>() : "";
  for (const std::string& assignment : overrides) {
    if (assignment.rfind("model.type=", 0) == 0) type = assignment.substr(11);
  }
  const std::string source_type = source.model.value("type", "gpt");
  CLEAVE_CHECK_INPUT(
      type.empty() || type == source_type,
      "train --init-from: model.type is \"{}\" in {}, but the weights in {} are {} model; remove model.type "
      "(and the other model keys) from the config or start from {} weights",
      type, config_name(config_path), source.model_origin, with_article(source_type), type);
}

// A model.seq_len given (in `model` or by --set, which wins) may be any length up to the model's maximum; above it,
// it is refused before anything else is read. A value that is no integer is left to the ordinary reader.
void check_seq_len_fits(const json& model, const std::vector<std::string>& overrides, const WeightSource& source) {
  const std::int64_t max_len = max_seq_len_of(source);
  const std::string max_key = source.model.contains("max_seq_len") ? "max_position_embeddings" : "its position table's rows";
  std::int64_t seq = -1;
  if (auto v = model.find("seq_len"); v != model.end() && v->is_number_integer()) seq = v->get<std::int64_t>();
  for (const std::string& assignment : overrides) {
    if (assignment.rfind("model.seq_len=", 0) != 0) continue;
    try {
      seq = std::stoll(assignment.substr(14));
    } catch (const std::exception&) {
      seq = -1;
    }
  }
  CLEAVE_CHECK_INPUT(
      seq <= max_len,
      "train --init-from: model.seq_len {} is above the model's maximum {} ({} in {}); set model.seq_len "
      "to at most {} (nothing was written)",
      seq, max_len, max_key, source.model_origin, max_len);
}

// Every model key of the weights (but seq_len, checked before, and the training arguments, where the config's value
// wins) is the run's.
void check_model_keys_agree(const config::RunConfig& config, const WeightSource& source,
                            const std::string& config_path) {
  const json run = json::parse(config::to_json(config)).at("model");
  for (const auto& [key, value] : source.model.items()) {
    if (key == "seq_len") continue;
    if (config::is_model_training_key(key)) continue;
    const json have = run.contains(key) ? run.at(key) : json();
    CLEAVE_CHECK_INPUT(
        have == value,
        "train --init-from: model.{} is {} in {}, but {} in {}; remove model.{} from the config (it is taken "
        "from the weights) or make the two agree",
        key, have.dump(), config_name(config_path), value.dump(), source.model_origin, key);
  }
}

// A model with a tokenizer of its own reads token ids of that tokenizer; data.type "text" feeds it raw bytes
// 0..255 as ids, which are other tokens to it (a training that runs and learns nothing it was meant to).
void check_data_fits_tokenizer(const config::RunConfig& config, const WeightSource& source) {
  const std::string from = source.source.is_object() ? source.source.value("path", std::string()) : std::string();
  const fs::path tokenizer = from.empty() ? fs::path() : fs::path(from) / "tokenizer.json";
  CLEAVE_CHECK_INPUT(
      config.data.type != config::DataType::kText || from.empty() || !fs::is_regular_file(tokenizer),
      "train --init-from: the model has a tokenizer of its own ({}), but data.type is \"text\", which feeds "
      "raw bytes 0..255 as token ids (other tokens to this model); tokenize the text with it: cleave "
      "tokenize FILES --tokenizer {} --out DIR, then --set data.type=tokens --set data.path=DIR/train.bin "
      "--set data.val_path=DIR/val.bin (docs/models.md, \"Fine-tuning a downloaded model\")",
      tokenizer.string(), tokenizer.string());
}

}  // namespace

config::RunConfig config_for_init(const std::string& config_path, const std::vector<std::string>& overrides,
                                  const WeightSource& source) {
  json root = read_config_json(config_path);
  // Unreadable or not an object: the ordinary reader gives the message.
  if (!root.is_object()) return config::load_config(config_path, overrides);
  const std::set<std::string> given = given_model_keys(root, overrides);
  json& model = root["model"];
  if (!model.is_object()) model = json::object();
  check_model_type(model, overrides, source, config_path);
  for (const auto& [key, value] : source.model.items()) {
    if (given.count(key) == 0) model[key] = value;
  }
  if (given.count("seq_len") != 0) check_seq_len_fits(model, overrides, source);
  config::RunConfig config =
      config::parse_config(root.dump(), config_path.empty() ? "<defaults>" : config_path, overrides);
  config::resolve_input_paths(config, config_path, root.dump(), overrides);  // as load_config: the file's data section
  check_model_keys_agree(config, source, config_path);
  check_data_fits_tokenizer(config, source);
  return config;
}

std::size_t load_weights(RankSetup& s, RankModel& model, const WeightSource& source) {
  RankFailure failure;
  const auto& params = model.params();
  std::vector<std::vector<float>> values(params.size());
  try {
    const json run = json::parse(config::to_json(s.config)).at("model");
    for (const auto& [key, value] : source.model.items()) {
      const json have = run.contains(key) ? run.at(key) : json();
      if (key == "seq_len" && have.is_number_integer() && have.get<std::int64_t>() <= max_seq_len_of(source)) continue;
      if (config::is_model_training_key(key)) continue;
      CLEAVE_CHECK_FITS(have == value, "{} was saved from a different model: model.{} is {} there, {} in this run",
                        source.origin, key, value.dump(), have.dump());
    }
    for (std::size_t i = 0; i < params.size(); ++i) {
      const layers::Param& p = *params[i];
      const Shape shape = logical_shape(p);
      const std::vector<std::int64_t> dims(shape.dims().begin(), shape.dims().end());
      // A tensor the source lacks, of another shape or not finite: the source named on the command line is wrong
      // (bad input, exit 64); its damage stays CheckpointDamage.
      std::vector<float> logical = reading_input([&] {
        std::vector<float> values = source.tensor(p.name, dims);
        check_finite_weights(source.origin, p.name, values);
        return values;
      });
      values[i] = p.shard.dim < 0 ? std::move(logical) : layers::shard_of(logical, p.shard);
      CLEAVE_ASSERT(static_cast<std::int64_t>(values[i].size()) == p.value.numel(), "{}: shard of {} elements for {}",
                    p.name, values[i].size(), p.value.numel());
    }
  } catch (const std::exception& e) {
    failure = rank_failure(e);
  }
  throw_if_any_rank_failed(s.world, failure);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor& value = params[i]->value;
    if (value.device().is_cpu()) {
      std::memcpy(value.data<float>(), values[i].data(), values[i].size() * sizeof(float));
    } else {  // GPU runs: through one host buffer at a time
      const Shape flat{value.numel()};
      ops::transfer(s.context, Tensor::from_floats(values[i], flat), value.view(flat));
      ops::synchronize(s.context);
    }
  }
  layers::refresh_working_copies(params, s.context);
  return params.size();
}

}  // namespace cleave::train

// read_hf_config, dims_of_model, hf_config_json (hf_config.hpp): the keys every architecture shares here, each
// architecture's own through its row of the architecture table (hf_architecture.hpp, engine/hf/families/).
#include "engine/hf/hf_config.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/hf/hf_architecture.hpp"

namespace cleave::hf {
namespace {

using nlohmann::json;

// Keys of transformers' PretrainedConfig (and its generation defaults) that leave a causal LM's logits alone:
// bookkeeping, token ids, generation settings, labels of task heads Cleave does not build.
constexpr std::array<std::string_view, 55> kCommonKeys = {
    "architectures", "model_type", "transformers_version", "_name_or_path", "torch_dtype", "dtype", "use_cache",
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id", "initializer_range",
    "return_dict", "output_hidden_states", "output_attentions", "torchscript", "use_bfloat16", "tf_legacy_loss",
    "pruned_heads", "chunk_size_feed_forward", "is_encoder_decoder", "is_decoder", "tie_encoder_decoder",
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
    "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
    "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens", "finetuning_task", "id2label",
    "label2id", "tokenizer_class", "task_specific_params", "problem_type"};

// Keys Cleave writes without computing them (null token ids, 0.0 dropout): a source's value is kept.
constexpr std::array<std::string_view, 6> kSourceWins = {"bos_token_id", "eos_token_id", "resid_pdrop",
                                                          "embd_pdrop",   "attn_pdrop",   "attention_dropout"};

// Keys whose value is Cleave's even where the source's reads as the same model: dtype, architectures and
// model_type describe the file written; GPT-2's n_ctx (read only without n_positions) must not contradict it.
constexpr std::array<std::string_view, 5> kCleaveWins = {"dtype", "torch_dtype", "architectures", "model_type",
                                                         "n_ctx"};

const HfArchitecture* by_class(std::string_view name) {
  for (const HfArchitecture& a : hf_architectures()) {
    if (name == a.class_name) return &a;
  }
  return nullptr;
}

Architecture architecture_of(const json& config, const std::string& path) {
  const auto type = config.find("model_type");
  const bool has_type = type != config.end() && type->is_string();
  if (auto it = config.find("architectures"); it != config.end() && it->is_array() && !it->empty()) {
    CLEAVE_CHECK(it->size() == 1 && it->front().is_string(), "{}: architectures must list one class name, got {}",
                 path, it->dump());
    const std::string name = it->front().get<std::string>();
    const HfArchitecture* a = by_class(name);
    CLEAVE_CHECK(a != nullptr, "{}: architecture {} is not supported; cleave imports {}", path, name,
                 hf_class_names());
    CLEAVE_CHECK(!has_type || *type == a->model_type,
                 "{}: architectures names {} but model_type is {} (that class's model_type is \"{}\"); one of the "
                 "two was edited: make them agree with the model's real class",
                 path, name, type->dump(), a->model_type);
    return a->architecture;
  }
  CLEAVE_CHECK(has_type, "{}: names no architecture (neither \"architectures\" nor \"model_type\")", path);
  for (const HfArchitecture& a : hf_architectures()) {
    if (*type == a.model_type) return a.architecture;
  }
  CLEAVE_THROW("{}: architecture model_type {} is not supported; cleave imports {}", path, type->get<std::string>(),
               hf_class_names());
}

// Every key must be one the class or the common list knows.
void check_known_keys(const json& config, const HfArchitecture& a, const std::string& path) {
  for (const auto& [key, value] : config.items()) {
    const bool known = std::find(kCommonKeys.begin(), kCommonKeys.end(), key) != kCommonKeys.end() ||
                       std::find(a.keys.begin(), a.keys.end(), key) != a.keys.end();
    CLEAVE_CHECK(known,
                 "{}: key \"{}\" ({}) is not one Cleave knows for {}, so it cannot tell whether it changes the "
                 "model's numbers; nothing was written. Remove the key from config.json if it does not (e.g. a "
                 "setting of another library), else this model cannot be imported",
                 path, key, value.dump().substr(0, 60), a.class_name);
  }
}


// The model a config.json document reads as, or nothing when read_hf_config refuses it.
std::optional<HfModelConfig> model_of(const json& config) {
  try {
    return read_hf_config(config, "config.json");
  } catch (const Error&) {
    return std::nullopt;
  }
}

// Puts back the source's value of every key of `merged` where it differs, one key at a time, when the document
// still reads as the same model (the same class and model section): a key the model does not use (Mixtral's
// head_dim null, a MoE's dense intermediate_size, sliding_window with use_sliding_window false) or one meaning
// the same (GPT-2's n_inner null: 4·n_embd) keeps the source's spelling; kCleaveWins keep Cleave's.
void keep_source_values(json& merged, const json& source, const json& cleave) {
  const std::optional<HfModelConfig> target = model_of(merged);
  if (!target) return;  // the caller's check names the difference
  for (const auto& [key, value] : source.items()) {
    if (std::find(kCleaveWins.begin(), kCleaveWins.end(), key) != kCleaveWins.end()) continue;
    if (!merged.contains(key) || merged.at(key) == value || !cleave.contains(key)) continue;
    json trial = merged;
    trial[key] = value;
    const std::optional<HfModelConfig> read = model_of(trial);
    if (read && read->model == target->model && read->dims.architecture == target->dims.architecture) {
      merged = std::move(trial);
    }
  }
}

}  // namespace

HfModelConfig read_hf_config(const json& config, const std::string& path) {
  CLEAVE_CHECK(config.is_object(), "{}: expected a JSON object, got {}", path, config.type_name());
  const Architecture a = architecture_of(config, path);
  const Keys k(config, path);
  HfModelConfig out = hf_architecture(a).read_config(k);  // the specific refusals first
  check_known_keys(config, hf_architecture(a), path);
  return out;
}

ModelDims dims_of_model(const json& model, const std::string& origin, std::string_view preferred_class) {
  const Keys k(model, origin + " model section");
  const std::string type = k.text_or("type", "gpt");
  const HfArchitecture* family = nullptr;
  for (const HfArchitecture& a : hf_architectures()) {
    if (family == nullptr && type == a.cleave_type) family = &a;
  }
  CLEAVE_CHECK_INPUT(family != nullptr,
                     "{}: model.type \"{}\" has no Hugging Face counterpart ({}); nothing was written (--format "
                     "cleave exports any model)",
                     origin, type, hf_export_names());
  ModelDims d;
  d.vocab_size = k.size("vocab_size");
  d.d_model = k.size("d_model");
  d.n_layers = k.size("n_layers");
  d.n_heads = k.size("n_heads");
  d.seq_len = k.size("seq_len");
  d.tied = k.flag_or("tie_embeddings", true);
  family->model_dims(k, d);
  const HfArchitecture* arch = nullptr;
  if (const HfArchitecture* p = by_class(preferred_class); p != nullptr && p->cleave_type == type && p->holds(d, model)) {
    arch = p;
  }
  for (const HfArchitecture& a : hf_architectures()) {
    if (arch == nullptr && type == a.cleave_type && a.holds(d, model)) arch = &a;
  }
  CLEAVE_CHECK_INPUT(arch != nullptr,
               "{}: no Hugging Face class holds this {} model (model.sliding_window {} from block {} with model.qkv_bias "
               "{} and model.qk_norm {}; a window from a later block needs q/k/v biases: Qwen2ForCausalLM; q/k norms "
               "take no window and no biases: Qwen3ForCausalLM); {}",
               origin, type, model.value("sliding_window", 0), model.value("sliding_window_from_layer", 0),
               model.value("qkv_bias", false), model.value("qk_norm", false), hf_export_names());
  d.architecture = arch->architecture;
  return d;
}

json hf_config_json(const json& model, std::string_view dtype, const json& source) {
  std::string preferred;
  if (source.is_object()) {
    if (auto it = source.find("architectures"); it != source.end() && it->is_array() && !it->empty() &&
                                                it->front().is_string()) {
      preferred = it->front().get<std::string>();
    }
  }
  const ModelDims d = dims_of_model(model, "export", preferred);
  json out;
  out["architectures"] = {std::string(architecture_class(d.architecture))};
  out["model_type"] = std::string(architecture_model_type(d.architecture));
  out["vocab_size"] = d.vocab_size;
  out["tie_word_embeddings"] = d.tied;
  out["dtype"] = std::string(dtype);  // transformers 4.56+ writes "dtype"; "torch_dtype" is deprecated
  out["bos_token_id"] = nullptr;  // a model Cleave made carries no special tokens
  out["eos_token_id"] = nullptr;
  hf_architecture(d.architecture).write_config(d, model, out);
  if (!source.is_object()) return out;
  // From the source: its keys, Cleave's values where Cleave computes one the source has; keys the source left
  // out keep transformers' defaults (read_hf_config read those same defaults into the model section).
  json merged = source;
  merged.erase("torch_dtype");
  const bool same_class = merged.value("architectures", json()) == out["architectures"];
  for (const auto& [key, value] : out.items()) {
    // The source's token ids and dropout (Cleave writes null and 0.0: it has neither; export carries them).
    if (std::find(kSourceWins.begin(), kSourceWins.end(), key) != kSourceWins.end() && merged.contains(key)) continue;
    if (merged.contains(key) || !same_class || key == "dtype" || key == "architectures" || key == "model_type") {
      merged[key] = value;
    }
  }
  keep_source_values(merged, source, out);
  return merged;
}

}  // namespace cleave::hf

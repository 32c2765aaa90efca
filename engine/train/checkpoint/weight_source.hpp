// Starting a run from weights made elsewhere: `cleave train CONFIG --init-from SOURCE`, where SOURCE is a
// Hugging Face model directory (engine/hf/hf_import.hpp) or a Cleave checkpoint (trained or weights-only).
// Only parameters are taken: the optimizer state starts fresh and the run starts at step 0.
//
// Invariants:
//  - config_for_init: the model keys SOURCE fixes (all of them for a checkpoint; those config.json gives for
//    HF) are taken from SOURCE when CONFIG does not set them; a key CONFIG (or --set) sets to another value
//    is ONE InputError (bad input: exit 64, which `cleave run` does not restart) naming model.<key> and both
//    values. Everything else of CONFIG is read as usual. The one exception is model.seq_len: any length up to the
//    model's maximum (max_seq_len: a Llama-like model's max_position_embeddings; a GPT's position table rows) is
//    taken; a GPT's learned position table is then sliced to its first seq_len rows; rotary positions need
//    nothing. Above the maximum: one InputError naming the numbers and the source, before any work.
//    The model's training keys (config/model_training_keys.hpp: aux_loss_coef, z_loss_coef, bias_update_rate)
//    are defaults from SOURCE that CONFIG may set to any value, as it sets optimizer.lr.
//  - load_weights is collective: every rank takes its tp shard of each parameter its stages hold (any tp, pp,
//    dp layout; the tied table on both pp ends); all are read and checked before any is assigned, and an
//    error on any rank is thrown on every rank, keeping its type (checkpoint_pieces.hpp). A tensor SOURCE lacks,
//    holds in another shape or with a NaN or an infinity (finite_weights.hpp) is bad input (InputError: exit 64),
//    naming the tensor; SOURCE's damage stays CheckpointDamage; a model key that differs is CheckpointMismatch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/config/config.hpp"

namespace cleave::train {

struct RankSetup;
class RankModel;

struct WeightSource {
  std::string origin;     // "Hugging Face GPT2LMHeadModel in DIR" | "checkpoint DIR"
  std::string model_origin;  // where the model keys come from, for messages ("DIR/config.json")
  nlohmann::json model;   // the model keys the weights fix ({"type", ...}), as config::to_json writes them
  // Where the weights were made: index.json "source" of the checkpoints a run from them saves (a Hugging Face
  // directory: hf::hf_source_record; a checkpoint: the "source" it carries; null: none).
  nlohmann::json source;
  std::vector<std::string> notes;  // keys of the source without Cleave meaning (printed by the caller)
  // The logical tensor `name` (f32, Cleave's order); throws Error naming the source when it has no such tensor
  // or another shape.
  std::function<std::vector<float>(const std::string& name, const std::vector<std::int64_t>& shape)> tensor;
};

// Reads SOURCE: a Hugging Face directory (config.json, safetensors) whole, or a Cleave checkpoint's index
// (a step_NNNNNNN directory or a directory holding them: its latest complete one; tensors read on demand).
WeightSource open_weight_source(const std::string& path);
// SOURCE's model keys, origin and record without its tensors (a Hugging Face directory: config.json and
// generation_config.json only; `tensor` is empty), for config_for_init where the weights are not loaded
// (`cleave run`'s supervisor plans for the model the run trains). The same errors as open_weight_source for
// those files.
WeightSource open_weight_source_model(const std::string& path);

// The run config of `train CONFIG_PATH --set ... --init-from SOURCE` (see the invariants above).
config::RunConfig config_for_init(const std::string& config_path, const std::vector<std::string>& overrides,
                                  const WeightSource& source);

// The longest model.seq_len `source` serves: its model's max_seq_len when it has one, else its seq_len.
std::int64_t max_seq_len_of(const WeightSource& source);
// "seq_len 64 of at most 8192 (rotary positions: nothing sliced)" for the run record and the log.
std::string describe_context(const WeightSource& source, const config::RunConfig& config);

// Assigns every parameter of this rank from `source` (collective; see above). The optimizer is untouched. Logs
// nothing: the caller says what the weights are for (a run's start, or generation). Returns the tensors
// assigned on this rank.
std::size_t load_weights(RankSetup& setup, RankModel& model, const WeightSource& source);

}  // namespace cleave::train

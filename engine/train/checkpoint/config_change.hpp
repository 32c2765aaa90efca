// Resuming with a changed config: which keys a resumed run may change and which need the user's say-so.
//
// A resumed run continues the checkpoint's run, so the config it was trained with (index.json "config") is
// compared key by key with the one given now. Keys that say how long to train, what to log, when to evaluate
// or checkpoint, and how the same computation is laid out on the ranks (parallel.*, the micro-batch split of
// the same global batch, ZeRO, recomputation, the memory cap) change freely, as a Megatron or torchtitan user
// expects. Every other key (the optimizer's hyper-parameters, the data, the precision, ...) changes the
// training itself: refused, naming each key with its old and new value, unless allowed by name with
// `--allow-config-change KEY[,KEY]`. The model, train.seed, batch.global_batch_size and optimizer.type are
// checked by the checkpoint loader itself (they cannot change), except the model's training keys
// (config/model_training_keys.hpp: model.aux_loss_coef, model.z_loss_coef, model.bias_update_rate), which are
// training changes like optimizer.lr. Either way every change is recorded (run.json,
// metrics.jsonl, the previous config.json kept beside the new one).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace cleave::train {

struct ConfigChange {
  std::string key;          // "optimizer.lr"
  nlohmann::json before;    // null when the key was absent
  nlohmann::json after;     // null when the key is absent now
  bool free = false;        // changes_freely_on_resume(key)
  std::string describe() const;  // "optimizer.lr 0.003 -> 0.001"
};

// True for the keys a resumed run may change without --allow-config-change (see the file comment).
bool changes_freely_on_resume(std::string_view key);

// Every leaf key ("section.key", arrays as values) whose value differs between two config JSON objects, in
// key order of `after` (then keys only `before` has).
std::vector<ConfigChange> config_changes(const nlohmann::json& before, const nlohmann::json& after);

// Throws InputError (bad input: `cleave` exits ExitCode::kBadInput, `cleave run` does not restart it) when an entry
// of `allowed` is not a leaf key of `config` (a config as config::to_json writes it): a typo would allow nothing. The
// message names every such entry with the nearest key by spelling where one is close, else the keys of its
// section. So is an entry the checkpoint loader checks (model.* but its training keys, train.seed, batch.global_batch_size,
// optimizer.type): those cannot change, so naming one would allow nothing either. `cleave train` runs it as soon as
// the config is read, before any work; check_config_changes again.
void check_allowed_keys(const std::vector<std::string>& allowed, const nlohmann::json& config);

// Throws CheckpointMismatch when a change that is not free is not in `allowed` (the keys the checkpoint loader checks
// are left to it), naming every such key with both values and the flag that allows it; first check_allowed_keys.
// `source` names the checkpoint in the message.
void check_config_changes(const std::vector<ConfigChange>& changes, const std::vector<std::string>& allowed,
                          const nlohmann::json& after, const std::string& source);

// "a,b" -> {"a", "b"} (empty entries dropped).
std::vector<std::string> split_key_list(const std::string& text);

}  // namespace cleave::train

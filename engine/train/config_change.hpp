// Resuming with a changed config: which keys a resumed run may change and which need the user's say-so.
//
// A resumed run continues the checkpoint's run, so the config it was trained with (index.json "config") is
// compared key by key with the one given now. Keys that say how long to train, what to log, when to evaluate
// or checkpoint, and how the same computation is laid out on the ranks (parallel.*, the micro-batch split of
// the same global batch, ZeRO, recomputation, the memory cap) change freely, as a Megatron or torchtitan user
// expects. Every other key (the optimizer's hyper-parameters, the data, the precision, ...) changes the
// training itself: refused, naming each key with its old and new value, unless allowed by name with
// `--allow-config-change KEY[,KEY]`. The model, train.seed, batch.global_batch_size and optimizer.type are
// checked by the checkpoint loader itself (they cannot change). Either way every change is recorded (run.json,
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

// Throws Error when a change that is not free is not in `allowed` (the keys the checkpoint loader checks are
// left to it), naming every such key with both values and
// the flag that allows it; also when an `allowed` entry is not a key of `after` (a typo allows nothing).
// `source` names the checkpoint in the message.
void check_config_changes(const std::vector<ConfigChange>& changes, const std::vector<std::string>& allowed,
                          const nlohmann::json& after, const std::string& source);

// "a,b" -> {"a", "b"} (empty entries dropped).
std::vector<std::string> split_key_list(const std::string& text);

}  // namespace cleave::train

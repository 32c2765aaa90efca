// See config_change.hpp.
#include "engine/train/checkpoint/config_change.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <map>

#include "engine/checkpoint/checkpoint_damage.hpp"
#include "engine/config/model_training_keys.hpp"
#include "engine/core/edit_distance.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"

namespace cleave::train {
namespace {

using nlohmann::json;

// A key or a whole section ("parallel" covers parallel.partition.method).
constexpr std::array<std::string_view, 18> kFree = {
    "train.steps",        "train.log_interval",       "train.eval_interval",
    "train.eval_batches", "train.report",             "train.trace",  "train.skip_nonfinite_steps",
    "train.comm_timeout_s", "train.out_dir",          "train.recompute",
    "train.deterministic", "checkpoint",              "parallel",
    "batch.micro_batch_size", "batch.gradient_accumulation_steps", "device.memory_limit",
    "optimizer.zero_stage", "optimizer.zero_reduce"};

// Checked by the checkpoint loader with messages of their own; they cannot change, flag or not. The model's training
// keys (config/model_training_keys.hpp: model.aux_loss_coef, ...) are not: they change with the flag.
constexpr std::array<std::string_view, 4> kLoaderChecked = {"model", "train.seed", "batch.global_batch_size",
                                                             "optimizer.type"};

bool matches(std::string_view key, std::string_view entry) {
  return key == entry || (key.starts_with(entry) && key.size() > entry.size() && key[entry.size()] == '.');
}

bool loader_checked(std::string_view key) {
  constexpr std::string_view kModel = "model.";
  if (key.starts_with(kModel) && config::is_model_training_key(key.substr(kModel.size()))) return false;
  return std::any_of(kLoaderChecked.begin(), kLoaderChecked.end(),
                     [&](std::string_view entry) { return matches(key, entry); });
}

void flatten(const json& value, const std::string& prefix, std::vector<std::pair<std::string, json>>& out) {
  if (!value.is_object()) {
    out.emplace_back(prefix, value);
    return;
  }
  for (const auto& [key, item] : value.items()) flatten(item, prefix.empty() ? key : prefix + "." + key, out);
}

std::string shown(const json& value) { return value.is_null() ? std::string("absent") : value.dump(); }

// Why `key` is no config key: the nearest leaf key by spelling, else the leaves of the section it names.
std::string hint_for(const std::string& key, const std::vector<std::string>& keys) {
  if (const std::string near = closest_spelling(key, keys); !near.empty()) return fmt::format("did you mean {}?", near);
  const std::string section = key.substr(0, key.find('.'));
  std::vector<std::string> siblings;
  for (const std::string& k : keys) {
    if (k.starts_with(section + ".")) siblings.push_back(k);
  }
  if (siblings.empty()) return "give full key paths as config.json writes them, e.g. optimizer.lr";
  return fmt::format("the keys of {} are {}", section, fmt::join(siblings, ", "));
}

}  // namespace

void check_allowed_keys(const std::vector<std::string>& allowed, const json& config) {
  std::vector<std::pair<std::string, json>> leaves;
  flatten(config, "", leaves);
  std::vector<std::string> keys;
  for (const auto& [key, value] : leaves) keys.push_back(key);
  std::string refused;
  for (const std::string& key : allowed) {
    const auto sep = refused.empty() ? "" : "; ";
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      refused += fmt::format("{}'{}' is not a config key ({})", sep, key, hint_for(key, keys));
    } else if (loader_checked(key)) {
      refused += fmt::format("{}'{}' cannot change on a resume, allowed or not: the checkpoint fixes the model "
                             "(all but its training keys {}), train.seed, batch.global_batch_size and optimizer.type; "
                             "remove it from the flag",
                             sep, key, fmt::join(config::kModelTrainingKeys, ", "));
    }
  }
  if (!refused.empty()) throw InputError(fmt::format("--allow-config-change: {}", refused));
}

std::string ConfigChange::describe() const { return fmt::format("{} {} -> {}", key, shown(before), shown(after)); }

bool changes_freely_on_resume(std::string_view key) {
  return std::any_of(kFree.begin(), kFree.end(), [&](std::string_view free) { return matches(key, free); });
}

std::vector<ConfigChange> config_changes(const json& before, const json& after) {
  std::vector<std::pair<std::string, json>> old_leaves, new_leaves;
  flatten(before, "", old_leaves);
  flatten(after, "", new_leaves);
  std::map<std::string, json> old_by_key(old_leaves.begin(), old_leaves.end());
  std::vector<ConfigChange> out;
  for (const auto& [key, value] : new_leaves) {
    const auto it = old_by_key.find(key);
    const json old_value = it == old_by_key.end() ? json() : it->second;
    if (it != old_by_key.end()) old_by_key.erase(it);
    if (old_value != value) out.push_back({key, old_value, value, changes_freely_on_resume(key)});
  }
  for (const auto& [key, value] : old_leaves) {
    if (old_by_key.count(key)) out.push_back({key, value, json(), changes_freely_on_resume(key)});
  }
  return out;
}

void check_config_changes(const std::vector<ConfigChange>& changes, const std::vector<std::string>& allowed,
                          const json& after, const std::string& source) {
  check_allowed_keys(allowed, after);
  std::string refused, flag, restore;
  for (const ConfigChange& c : changes) {
    if (c.free || std::find(allowed.begin(), allowed.end(), c.key) != allowed.end()) continue;
    if (loader_checked(c.key)) continue;
    refused += fmt::format("{}{}", refused.empty() ? "" : ", ", c.describe());
    flag += fmt::format("{}{}", flag.empty() ? "" : ",", c.key);
    if (!c.before.is_null()) restore += fmt::format(" --set {}={}", c.key, c.before.dump());
  }
  CLEAVE_CHECK_FITS(refused.empty(),
               "--resume {}: the config differs from the one the checkpoint was trained with: {}; a resumed run keeps "
               "these unless you allow the change with --allow-config-change {} (it is then recorded in run.json "
               "and metrics.jsonl), or set them back:{}",
               source, refused, flag, restore);
}

std::vector<std::string> split_key_list(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace cleave::train

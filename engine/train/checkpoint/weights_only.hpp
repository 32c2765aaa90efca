// Weights-only Cleave checkpoints: what `cleave import` writes from a Hugging Face model. The same directory
// format as a trained checkpoint (checkpoint_save.cpp: index.json, every tensor a whole piece, dim -1) with
// "weights_only": true, optimizer {"type": "none", "steps_done": 0} and step 0: parameters only, no
// optimizer state, no data-stream position. `cleave train --init-from`, `generate` and `export` read it;
// `train --resume` refuses it (there is no run to continue), naming --init-from.
//
// Invariant: write_weights_checkpoint writes `root`/step_0000000 atomically (engine/checkpoint/
// checkpoint_dir.hpp) or nothing, and refuses a `root` that exists.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cleave::train {

struct WeightsOnlyStats {
  std::string path;  // the committed step directory
  std::int64_t bytes = 0;
  int tensors = 0;
};

// `model`: the model section exactly as config::to_json writes it (a run compares it key by key);
// `tensors` / `shapes`: Cleave logical names -> f32 values and shapes; `source`: recorded as index.json
// "source" (e.g. {"format": "huggingface", "architecture", "path"}).
WeightsOnlyStats write_weights_checkpoint(const std::string& root, const nlohmann::json& model,
                                          const std::map<std::string, std::vector<float>>& tensors,
                                          const std::map<std::string, std::vector<std::int64_t>>& shapes,
                                          const nlohmann::json& source);

// True for an index.json written by write_weights_checkpoint.
bool is_weights_only(const nlohmann::json& index);

}  // namespace cleave::train

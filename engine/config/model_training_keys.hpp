// The keys of the model section that are training arguments, not architecture: the mixture-of-experts loss
// coefficients and the sigmoid router's bias step. They shape the gradient (and the bias's update) but no
// parameter, so weights saved under one value load under another, as Megatron passes them on the command line of
// each run (--moe-aux-loss-coeff, --moe-z-loss-coeff, --moe-router-bias-update-rate).
//
// Invariant: every key listed is a model key no parameter's shape or meaning depends on. The checkpoint loader and
// `--init-from` skip them when they compare a saved model with the run's; a resume that changes one is a training
// change (engine/train/checkpoint/config_change.hpp: refused unless `--allow-config-change model.KEY` names it), and
// `--init-from` takes the config's value over the weights'. A key that changes what a parameter holds (n_experts,
// top_k, router, n_shared_experts, ...) stays out.
#pragma once

#include <algorithm>
#include <array>
#include <string_view>

namespace cleave::config {

inline constexpr std::array<std::string_view, 3> kModelTrainingKeys = {"aux_loss_coef", "z_loss_coef",
                                                                       "bias_update_rate"};

// True for a key of the model section (without the "model." prefix) listed above.
inline bool is_model_training_key(std::string_view model_key) {
  return std::find(kModelTrainingKeys.begin(), kModelTrainingKeys.end(), model_key) != kModelTrainingKeys.end();
}

}  // namespace cleave::config

// optimizer.type -> AdamW or Sgd with the section's hyper-parameters.
#include "engine/optim/optimizer_factory.hpp"

#include "engine/core/error.hpp"

namespace cleave::optim {

std::unique_ptr<Optimizer> make_optimizer(const config::OptimizerConfig& config, const ParamList& params,
                                          Allocator& allocator) {
  switch (config.type) {
    case config::OptimizerType::kAdamw:
      return std::make_unique<AdamW>(
        params, AdamWOptions{config.betas[0], config.betas[1], config.eps, config.weight_decay}, allocator);
    case config::OptimizerType::kSgd:
      return std::make_unique<Sgd>(params, SgdOptions{config.momentum, config.weight_decay, config.nesterov},
                                 allocator);
  }
  CLEAVE_ASSERT(false, "unknown OptimizerType {}", static_cast<int>(config.type));
  return nullptr;
}

}  // namespace cleave::optim

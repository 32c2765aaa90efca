// RankModel: builds this rank's stages and its tied-table group (see rank_model.hpp).
#include "engine/train/rank_model.hpp"

#include <algorithm>

#include "kernels/ops/ops.hpp"
#include "layers/models/builder.hpp"
#include "layers/parallel/tp_util.hpp"
#include "partition/cost_model.hpp"

namespace cleave::train {

RankModel::RankModel(RankSetup& setup) {
  const run_plan::Plan& plan = setup.plan;
  const config::RunConfig& cfg = setup.config;
  layers::BuildOptions build;
  build.seed = cfg.train.seed;
  build.tp_size = setup.grid.tp_size();
  build.tp_rank = setup.coords.tp_rank;
  build.ep_size = setup.grid.ep_size();
  build.ep_rank = setup.coords.ep_rank;
  // On a GPU the parameters are built on a host allocator, exactly as on the CPU (same seeds, same values;
  // initialisation writes through host pointers), then moved to the device below.
  if (setup.on_device()) host_build_ = make_cpu_allocator();
  build.allocator = host_build_ ? host_build_.get() : setup.allocator.get();
  build.recompute = cfg.train.recompute;
  tied_name_ = plan.spec.tied_parameters.empty() ? std::string() : plan.spec.tied_parameters.front();
  for (int stage : plan.local_stages) {
    const auto& range = plan.partition.stages[static_cast<std::size_t>(stage)];
    auto blocks = layers::build_blocks(plan.spec, static_cast<std::size_t>(range.begin),
                                       static_cast<std::size_t>(range.end), build);
    auto module = std::make_unique<pipeline::StageModule>(std::move(blocks), stage == 0,
                                                          stage == plan.num_stages() - 1);
    if (setup.context.sequence_parallel) {
      // Replicated parameters' gradients are partial over tp: summed once per step, before dp sees them.
      module->set_partial_grad_sum([&context = setup.context](const std::vector<layers::Param*>& params) {
        layers::sum_replicated_grads_over_tp(params, context);
      });
    }
    for (const auto& p : module->params()) {
      if (p->name == tied_name_) build.tied_table = p;  // a later local head shares it
    }
    stage_by_index_[stage] = module.get();
    stages_.push_back(std::move(module));
  }
  for (const auto& stage : stages_) {
    for (const auto& p : stage->params()) {
      if (std::find(params_.begin(), params_.end(), p) == params_.end()) params_.push_back(p);
    }
  }
  if (host_build_) {
    for (const auto& p : params_) {
      p->value = ops::to_device(setup.context, p->value, MemoryCategory::kParameters);
      p->grad = Tensor::zeros(p->grad.shape(), p->grad.dtype(), MemoryCategory::kGradients, *setup.allocator);
    }
  }
  // A tied table whose embedding and head live on different pp ranks exists twice; the group keeps the copies
  // equal by summing their gradients every step. It is built here rather than taken from the grid's embedding
  // group (first and last pp rank): under ZB-V's V placement the head's stage sits on another rank than the
  // last stage.
  if (plan.tied_table_split()) {
    const int embedding_stage = plan.stage_of_block(partition::BlockKind::kEmbedding);
    const int head_stage = plan.stage_of_block(partition::BlockKind::kLmHead);
    const bool member = holds_stage(embedding_stage) || holds_stage(head_stage);
    const int replica = setup.coords.tp_rank +
                        setup.grid.tp_size() * (setup.coords.cp_rank + setup.grid.cp_size() * setup.coords.dp_rank);
    tied_group_ = setup.world.split(member ? replica : -1, setup.coords.pp_rank, "tied_embedding");
    for (const auto& p : params_) {
      if (p->name == tied_name_) tied_table_ = p;
    }
    counts_tied_table_ = holds_stage(embedding_stage);
  }
}

bool RankModel::counts_in_norm(const layers::Param& p, int tp_rank) const {
  if (p.shard.dim < 0 && tp_rank != 0) return false;  // replicated over tp: tp rank 0 counts it
  return counts_tied_table_ || p.name != tied_name_;
}

void RankModel::enable_ordered_accumulation(int microbatches, const ops::Context& context) {
  std::vector<const layers::Param*> shared;  // held by two local stages (ZB-V's tied table): stays in place
  std::map<const layers::Param*, int> holders;
  for (const auto& stage : stages_) {
    for (const auto& p : stage->params()) {
      if (++holders[p.get()] == 2) shared.push_back(p.get());
    }
  }
  for (const auto& stage : stages_) stage->enable_ordered_accumulation(microbatches, shared, context);
}

}  // namespace cleave::train

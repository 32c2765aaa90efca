// RankModel: this rank's share of the model: its stages (built from (seed, logical name), so every layout
// starts from the same logical weights), the parameters they hold (each once), and the tied embedding
// table's second copy with the group that keeps the two equal. Checkpoints, parameter gather and generation
// read it; the step tail reduces, clips and updates its parameters.
//
// Invariants: `params()` lists every parameter of the local stages once, in stage then layer order (the
// order optimizers and checkpoints see); when the tied table's embedding and head sit on different pp ranks,
// both copies exist and `tied_group()` sums their gradients each step, and only the embedding's copy counts
// in norms and checkpoints (`counts_in_norm`).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/optim/optimizer.hpp"
#include "engine/train/rank_setup.hpp"
#include "pipeline/stage_module.hpp"

namespace cleave::train {

class RankModel {
 public:
  // Builds the stages of setup.plan.local_stages (collective when the tied table is split: the tied group is
  // a split of the world).
  explicit RankModel(RankSetup& setup);
  RankModel(const RankModel&) = delete;
  RankModel& operator=(const RankModel&) = delete;

  const optim::ParamList& params() const { return params_; }
  const std::vector<std::unique_ptr<pipeline::StageModule>>& stages() const { return stages_; }
  const std::map<int, pipeline::StageModule*>& stage_by_index() const { return stage_by_index_; }
  bool holds_stage(int stage) const { return stage_by_index_.count(stage) != 0; }

  // The model's tied parameter's name ("" when none); this rank's copy of it when the table is split across
  // pp ranks (null otherwise) and the group of the two copies (null when not a member).
  const std::string& tied_name() const { return tied_name_; }
  const std::shared_ptr<layers::Param>& tied_table() const { return tied_table_; }
  comm::Communicator* tied_group() const { return tied_group_.get(); }
  // Whether `p` is counted on this rank in the global gradient norm and written by it to checkpoints (with
  // the tp rule of layers::counted_on_tp_rank applied by the caller where shards matter): false only for
  // the head's copy of a split tied table.
  bool counts_tied_copy() const { return counts_tied_table_; }
  bool counts_in_norm(const layers::Param& p, int tp_rank) const;

  // Deterministic mode: every stage sums micro-batch gradients in the canonical order (sum_tree.hpp). Call
  // after gradients have their final storage (data-parallel bucket views).
  void enable_ordered_accumulation(int microbatches, const ops::Context& context);

 private:
  // GPU runs: the host allocator the parameters were built on before their move (outlives the stages, in
  // case a layer kept a host view; null on the CPU).
  std::unique_ptr<Allocator> host_build_;
  std::vector<std::unique_ptr<pipeline::StageModule>> stages_;
  std::map<int, pipeline::StageModule*> stage_by_index_;
  optim::ParamList params_;
  std::string tied_name_;
  std::shared_ptr<layers::Param> tied_table_;
  bool counts_tied_table_ = true;
  std::unique_ptr<comm::Communicator> tied_group_;
};

}  // namespace cleave::train

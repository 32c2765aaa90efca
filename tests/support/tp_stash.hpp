// One tp rank's stash of every block of a language model against the cost model's tp layout, for the tp stash
// tests under mpiexec (tests/mpi: gpt_stash_test.cpp, llama_stash_test.cpp, moe_stash_test.cpp).
//
// The blocks are built for this rank at tp = the size of `tp_comm`, and a batch of 3 random token sequences runs
// through forward and then backward_input block by block. After each pass the bytes of the distinct storages a
// block's stash keeps alive (stash_bytes, unit/layers/layer_test_util.hpp) must equal partition::block_cost's
// figure for that block at that tp size, recompute mode and sequence parallelism: activation_bytes per sample
// after forward, weight_stash_bytes per sample after backward_input (what a zero-bubble schedule's W keeps
// between I and W), plus for a moe block the E f32 expert counts the micro-batch keeps for its weight gradient.
//
// Every rank of `tp_comm` calls it (the blocks' tp collectives); failures are EXPECTs naming the block and the
// pass, so the caller's SCOPED_TRACE names the case.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/core/allocator.hpp"
#include "layers/models/builder.hpp"
#include "partition/cost_model.hpp"
#include "partition/model_spec.hpp"
#include "support/tp_blocks.hpp"
#include "unit/layers/layer_test_util.hpp"

namespace cleave::testing {

inline void expect_tp_stash_matches_cost_model(const partition::ModelSpec& spec, comm::Communicator& tp_comm,
                                               partition::Recompute mode, bool sequence_parallel) {
  constexpr std::int64_t kBatch = kTpBatch;
  const int tp = tp_comm.size();
  TpBlocks run = build_tp_blocks(spec, tp_comm, tp_comm, mode, sequence_parallel);
  auto& blocks = run.blocks;
  layers::Context& ctx = run.ctx;
  const Tensor& targets = run.targets;
  Tensor x = run.x;
  std::vector<layers::Stash> stashes(blocks.size());
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    x = layers::forward_block(*blocks[i], x, targets, stashes[i], ctx);
    const auto cost = partition::block_cost(spec.blocks[i], DType::kF32, mode, tp, sequence_parallel);
    EXPECT_EQ(layers::testing::stash_bytes(stashes[i]), cost.activation_bytes * kBatch)
        << spec.blocks[i].name << " after forward";
  }
  Tensor dy = Tensor::from_floats(std::vector<float>{1.0f}, Shape{1});
  for (std::size_t i = blocks.size(); i-- > 0;) {
    dy = blocks[i]->backward_input(dy, stashes[i], ctx);
    const partition::BlockSpec& block = spec.blocks[i];
    const auto cost = partition::block_cost(block, DType::kF32, mode, tp, sequence_parallel);
    const bool moe = block.kind == partition::BlockKind::kMoeBlock;
    const std::int64_t expert_counts = moe ? block.n_experts * static_cast<std::int64_t>(sizeof(float)) : 0;
    EXPECT_EQ(layers::testing::stash_bytes(stashes[i]), cost.weight_stash_bytes * kBatch + expert_counts)
        << block.name << " after backward_input";
  }
}

}  // namespace cleave::testing

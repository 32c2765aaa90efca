// One tp rank's tensor-parallel collectives of every block of a language model against the cost model's list
// (partition::tp_block_comm, which the planner's tensor_parallel term prices), for the tp tests under mpiexec
// (tests/mpi: gpt_stash_test.cpp, llama_stash_test.cpp, moe_stash_test.cpp).
//
// The blocks are built for this rank at tp = the size of `tp_comm`, which a RecordingCommunicator wraps, and a batch
// of 3 random token sequences runs forward block by block, then backward_input and backward_weight block by block
// from the last. Each pass's collectives, in the order posted, must equal the cost model's list for that block and
// pass, op by op, for a micro-batch of 3: forward, input_grad (a full recomputation's rerun first), weight_grad.
//
// Every rank of `tp_comm` calls it; failures are EXPECTs naming the block and the pass, so the caller's SCOPED_TRACE
// names the case.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/core/allocator.hpp"
#include "layers/models/builder.hpp"
#include "partition/cost_model.hpp"
#include "partition/families/kinds.hpp"
#include "partition/model_spec.hpp"
#include "support/recording_communicator.hpp"
#include "support/tp_blocks.hpp"
#include "unit/layers/layer_test_util.hpp"

namespace cleave::testing {

// "all_reduce 1536 B, ..." for a list of collectives as posted (each its own entry) or as the cost model lists them
// for a micro-batch of `batch` samples (kWhole: one of batch × bytes; kPerSample: `batch` of bytes; kFixed: one).
inline std::string tp_collectives_text(const std::vector<partition::TpCollective>& list, std::int64_t batch) {
  std::string out;
  const auto add = [&](partition::Collective op, std::int64_t bytes) {
    out += std::string(out.empty() ? "" : ", ") + std::string(enum_name(op)) + " " + std::to_string(bytes) + " B";
  };
  for (const partition::TpCollective& c : list) {
    switch (c.batching) {
      case partition::TpBatching::kWhole: add(c.op, c.bytes * batch); break;
      case partition::TpBatching::kPerSample:
        for (std::int64_t b = 0; b < batch; ++b) add(c.op, c.bytes);
        break;
      case partition::TpBatching::kFixed: add(c.op, c.bytes); break;
    }
  }
  return out.empty() ? "none" : out;
}

inline void expect_tp_collectives_match_cost_model(const partition::ModelSpec& spec, comm::Communicator& tp_comm,
                                                   partition::Recompute mode, bool sequence_parallel) {
  constexpr std::int64_t kBatch = kTpBatch;
  const int tp = tp_comm.size();
  RecordingCommunicator recorder(tp_comm);
  TpBlocks run = build_tp_blocks(spec, tp_comm, recorder, mode, sequence_parallel);
  auto& blocks = run.blocks;
  layers::Context& ctx = run.ctx;
  const Tensor& targets = run.targets;
  Tensor x = run.x;
  const auto expect_pass = [&](const std::vector<partition::TpCollective>& priced, const partition::BlockSpec& block,
                               const char* pass) {
    EXPECT_EQ(tp_collectives_text(recorder.take(), 1), tp_collectives_text(priced, kBatch))
        << block.name << " (" << partition::block_kind_name(block.kind) << "), " << pass;
  };
  std::vector<layers::Stash> stashes(blocks.size());
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    x = layers::forward_block(*blocks[i], x, targets, stashes[i], ctx);
    const auto priced = partition::tp_block_comm(spec.blocks[i], DType::kF32, tp, sequence_parallel, mode);
    expect_pass(priced.forward, spec.blocks[i], "forward");
  }
  Tensor dy = Tensor::from_floats(std::vector<float>{1.0f}, Shape{1});
  for (std::size_t i = blocks.size(); i-- > 0;) {
    const auto priced = partition::tp_block_comm(spec.blocks[i], DType::kF32, tp, sequence_parallel, mode);
    dy = blocks[i]->backward_input(dy, stashes[i], ctx);
    expect_pass(priced.input_grad, spec.blocks[i], "backward_input");
    blocks[i]->backward_weight(stashes[i], ctx);
    expect_pass(priced.weight_grad, spec.blocks[i], "backward_weight");
  }
}

}  // namespace cleave::testing

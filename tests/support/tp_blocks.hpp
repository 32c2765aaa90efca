// The start of the tp tests' runs under mpiexec (support/tp_stash.hpp, support/tp_collectives.hpp): every block of
// `spec` built for this rank of `tp_comm` (tp = its size), a context whose tp group is `group` (tp_comm itself, or a
// communicator wrapping it) and a batch of kTpBatch random token sequences with their targets.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/core/allocator.hpp"
#include "layers/models/builder.hpp"
#include "partition/cost_model.hpp"
#include "partition/model_spec.hpp"
#include "unit/layers/layer_test_util.hpp"

namespace cleave::testing {

inline constexpr std::int64_t kTpBatch = 3;

struct TpBlocks {
  std::vector<layers::LayerPtr> blocks;
  layers::Context ctx;
  Tensor targets, x;  // [kTpBatch, T] token ids: the loss's targets, the embedding's input
};

inline TpBlocks build_tp_blocks(const partition::ModelSpec& spec, const comm::Communicator& tp_comm,
                                comm::Communicator& group, partition::Recompute mode, bool sequence_parallel) {
  layers::BuildOptions options{cpu_allocator()};
  options.tp_size = tp_comm.size();
  options.tp_rank = tp_comm.rank();
  options.recompute = mode;
  TpBlocks run;
  run.blocks = layers::build_blocks(spec, 0, spec.blocks.size(), options);
  run.ctx.tp_comm = &group;
  run.ctx.sequence_parallel = sequence_parallel;
  const auto sizes = spec.token_sizes();
  run.targets = layers::testing::random_ids(Shape{kTpBatch, sizes.seq_len}, sizes.vocab_size, 61);
  run.x = layers::testing::random_ids(Shape{kTpBatch, sizes.seq_len}, sizes.vocab_size, 62);
  return run;
}

}  // namespace cleave::testing

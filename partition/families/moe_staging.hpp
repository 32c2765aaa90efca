// The mixture-of-experts family's page-locked host staging on a GPU (host memory, not the device's): what
// layers/moe/ requests from Context::upload_staging per moe block and micro-batch, so the memory plan can report it
// beside the device figures (engine/run_plan/host_memory.hpp). Invariant: the figures are the byte sizes of the
// layer's own requests (moe_mlp.cpp upload_async, balance_exchange.cpp, expert_dispatch.cpp plan_dispatch), checked
// against a counting staging allocator by MoeMlp.UploadStagingIsThePlansFormula (tests/unit/layers/moe_test.cpp: the
// tables) and MoeStaging.* (tests/mpi/moe_staging_test.cpp, 2 ranks: the cp count row, the ep counts, and the memory
// plan's walk against the layers' peak over a plan's actions).
#pragma once

#include <cstdint>

namespace cleave::partition {

struct BlockSpec;

// Per moe block and micro-batch of `micro` samples on one rank (n = micro · T / cp tokens routed there; sequence
// parallelism gathers the whole tp group's tokens first, so tp does not divide n):
//   uploads   16 · n · k: the routing's row_token and row_weight [n·k] and token_row and weight [n, k], i32 and f32,
//             uploaded from staging and kept (GPU) from the forward to the end of the block's backward_input; a
//             forward no backward follows (full recomputation's first, evaluation's) waits for its copies at once
//   balance   8 · micro · (E + 1) under cp > 1 with the load-balancing loss on: the count exchange's row per sample,
//             kept like the uploads
//   dispatch  8 · E under ep > 1: the counts sent to the ep group, freed when plan_dispatch has read the received
//             counts back (inside the forward, while the block's uploads and balance row are held)
// 0 for a block that is not a moe block.
struct MoeUploadStaging {
  std::int64_t uploads = 0, balance = 0, dispatch = 0;
  std::int64_t held() const { return uploads + balance; }
};
MoeUploadStaging moe_upload_staging(const BlockSpec& block, std::int64_t micro, int cp, int ep);

}  // namespace cleave::partition

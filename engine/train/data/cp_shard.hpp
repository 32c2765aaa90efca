// The context-parallel share of a host batch: each sample's tokens (and next-token targets) that this cp rank
// holds (layers/context_parallel/cp_layout.hpp: the contiguous chunk r under all_to_all, chunks r and 2cp-1-r
// under ring), in increasing position. Every cp rank of a replica draws the same samples (the data sources
// never see cp) and keeps its part, so the cp ranks together hold each sample exactly once.
#pragma once

#include "engine/core/allocator.hpp"
#include "engine/train/data/data_source.hpp"
#include "layers/context_parallel/cp_layout.hpp"

namespace cleave::train {

// `host` unchanged when cp is inactive; else inputs and targets [B, T] i32 (host memory) -> [B, T / cp] on
// `allocator`. Throws Error when the batch is not token sequences of a length cp's chunks divide.
Batch cp_shard(const Batch& host, const layers::CpLayout& cp, Allocator& allocator);

}  // namespace cleave::train

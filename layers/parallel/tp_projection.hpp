// tp_projection: one linear projection [..., in] -> [..., out] for any tp size, the way the llama and moe blocks
// build theirs: a Linear on one rank, else this tp rank's column-parallel (output features split) or row-parallel
// (input features split) shard. Invariant: the shard's values are the slice of the Linear one rank would make
// (column_parallel_linear.hpp, row_parallel_linear.hpp), so every layout starts from the same logical weights.
#pragma once

#include <cstdint>
#include <string>

#include "layers/layer.hpp"
#include "layers/param_init.hpp"

namespace cleave::layers {

// Which features a tensor-parallel projection splits: the output's (column-parallel) or the input's (row-parallel).
enum class TpSplit { kColumns, kRows };

// A bias only where asked (Qwen2's q, k, v) and only on a column split or on one rank: a row-parallel projection
// with a bias is a bug (asserted).
LayerPtr tp_projection(const std::string& name, std::int64_t in, std::int64_t out, TpSplit split,
                       const ParamInit& init, int tp_size, int tp_rank, bool bias = false);

}  // namespace cleave::layers

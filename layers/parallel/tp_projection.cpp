// See tp_projection.hpp.
#include "layers/parallel/tp_projection.hpp"

#include <memory>

#include "engine/core/error.hpp"
#include "layers/linear.hpp"
#include "layers/parallel/column_parallel_linear.hpp"
#include "layers/parallel/row_parallel_linear.hpp"

namespace cleave::layers {

LayerPtr tp_projection(const std::string& name, std::int64_t in, std::int64_t out, TpSplit split,
                       const ParamInit& init, int tp_size, int tp_rank, bool bias) {
  if (tp_size == 1) return std::make_unique<Linear>(name, in, out, bias, init);
  if (split == TpSplit::kColumns) {
    return std::make_unique<ColumnParallelLinear>(name, in, out, bias, init, tp_size, tp_rank);
  }
  CLEAVE_ASSERT(!bias, "projection {}: a row-parallel projection has no bias", name);
  return std::make_unique<RowParallelLinear>(name, in, out, false, init, tp_size, tp_rank);
}

}  // namespace cleave::layers

// See moe_staging.hpp.
#include "partition/families/moe_staging.hpp"

#include "partition/model_spec.hpp"

namespace cleave::partition {

MoeUploadStaging moe_upload_staging(const BlockSpec& block, std::int64_t micro, int cp, int ep) {
  if (block.kind != BlockKind::kMoeBlock || block.n_experts <= 0) return {};
  const std::int64_t tokens = micro * block.seq_len / cp;
  MoeUploadStaging s;
  s.uploads = 4 * 4 * tokens * block.top_k;  // four tensors of n·k elements, 4 B each (i32 or f32)
  s.balance = cp > 1 && block.aux_loss ? 8 * micro * (block.n_experts + 1) : 0;
  s.dispatch = ep > 1 ? 8 * block.n_experts : 0;
  return s;
}

}  // namespace cleave::partition

// The parameter tensors of one block as its layer holds them on one tensor-parallel rank: each tensor's element
// count, in the layer's parameter order, with its role. The memory plan's ZeRO-3 units and per-micro-batch ZeRO-2
// buckets read it (engine/run_plan/zero_units.hpp: each gradient starts on a 64-byte boundary in its bucket, so a
// unit holds Σ round_up(numel, 16) f32 elements, not round_up(Σ numel, 16)).
//
// Invariant kept with layers/: the list is exactly the numels of the Params the tp rank's layer of the block holds
// (layers/models/builder.hpp build_blocks, collect_params), in order, padding rows of a vocab-parallel table
// included; tests/unit/layers/families/family_layers_test.cpp builds every family's blocks, with their optional
// tensors, at tp 1 and 2 and compares. The counts are the same on every tp rank (tp divides every split extent but
// the vocabulary, which is padded to a multiple of tp). A family-owned kind lists its tensors through its
// BlockRules::param_tensors (partition/families/family.hpp); the common kinds are listed in param_tensors.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "partition/model_spec.hpp"

namespace cleave::partition {

enum class ParamRole {
  kOwn,            // held by the block alone
  kTokenTable,     // the vocabulary table (embedding's token table, lm head's weight): shared when tied
  kRoutedExperts,  // a moe block's routed experts' tensor, all E of them (ep > 1: a rank holds numel / ep)
};

struct ParamTensor {
  std::int64_t numel = 0;  // one tp rank's elements
  ParamRole role = ParamRole::kOwn;
};

// The block's parameter tensors on one tp rank of `tp` (tp >= 1; a tied lm head lists the table it reads).
std::vector<ParamTensor> block_param_tensors(const BlockSpec& block, int tp);

// The elements a gradient bucket takes for `tensors` (those `keep` accepts) laid out one after another, each from a
// 64-byte boundary: Σ round_up(numel, align_elements), order-independent (engine/comm/gradient_bucket_layout.hpp).
template <typename Keep>
std::int64_t aligned_elements(const std::vector<ParamTensor>& tensors, std::int64_t align_elements, Keep keep,
                              std::int64_t divisor = 1) {
  std::int64_t sum = 0;
  for (const ParamTensor& t : tensors) {
    if (!keep(t)) continue;
    const std::int64_t n = t.numel / divisor;
    sum += (n + align_elements - 1) / align_elements * align_elements;
  }
  return sum;
}

}  // namespace cleave::partition

// Fused softmax + cross-entropy over [rows, classes] logits; never materialises a second copy of them.
//
// Invariant: a target of -1 marks an ignored row (padding): it contributes no loss and a zero gradient
// row. Any other target must be in [0, classes) (CLEAVE_CHECK names the row, the target and the class
// count). Forward stores every row's logsumexp in lse[rows] (also for ignored rows) and returns the SUM
// of the per-row losses (double). Backward writes dlogits = scale * (softmax - onehot); dlogits may alias
// logits (in place).
#pragma once

#include <cstdint>

namespace cleave::kernels::cpu {

double softmax_cross_entropy_forward(const float* logits, const int32_t* targets, float* lse, int64_t rows,
                                     int64_t classes);

void softmax_cross_entropy_backward(const float* logits, const int32_t* targets, const float* lse, float scale,
                                    float* dlogits, int64_t rows, int64_t classes);

// Rows whose target is not ignored (target >= 0): the usual denominator of a mean loss.
int64_t count_valid_targets(const int32_t* targets, int64_t rows);

}  // namespace cleave::kernels::cpu

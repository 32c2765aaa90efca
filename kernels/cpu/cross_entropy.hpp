// Fused softmax + cross-entropy over [rows, classes] logits; never materialises a second copy of them.
//
// Invariant: a target of -1 marks an ignored row (padding): it contributes no loss and a zero gradient
// row. Any other target must be in [0, classes) (CLEAVE_CHECK names the row, the target and the class
// count). Forward stores every row's logsumexp in lse[rows] (also for ignored rows) and returns the SUM
// of the per-row losses (double). Backward writes dlogits = scale * (softmax - onehot); dlogits may alias
// logits (in place).
//
// Every kernel also takes bf16 logits (and a bf16 dlogits): each row is widened into the thread's f32 row block
// as it is loaded and the gradient row narrowed as it is stored, so no whole-tensor f32 copy is made. The f32
// arithmetic is the same code on the same (exactly widened) values: the bits are those of widening the whole
// tensor, running the f32 kernel and narrowing its output (KernelCrossEntropy.Bf16RowsGiveTheWidenedF32Bits).
//
// scratch: where a call keeps its row blocks and the forward its per-row losses (kernel_scratch.hpp): the run's,
// so a steady-state call allocates nothing; null (tests, benchmarks) = one made for the call. Never changes a bit.
#pragma once

#include <cstdint>

#include "kernels/cpu/kernel_scratch.hpp"

namespace cleave::kernels::cpu {


double softmax_cross_entropy_forward(const float* logits, const int32_t* targets, float* lse, int64_t rows,
                                     int64_t classes, KernelScratch* scratch = nullptr);

void softmax_cross_entropy_backward(const float* logits, const int32_t* targets, const float* lse, float scale,
                                    float* dlogits, int64_t rows, int64_t classes, KernelScratch* scratch = nullptr);

// Rows whose target is not ignored (target >= 0): the usual denominator of a mean loss.
int64_t count_valid_targets(const int32_t* targets, int64_t rows);

// Vocab-parallel pieces (Megatron style). A tensor-parallel rank holds the logit columns
// [class_offset, class_offset + classes) of total_classes; targets are global class ids (-1 ignored). The
// layer combines the per-shard pieces across its tp group:
//   row_max  = all_reduce_max(shard_max)          sum_exp = all_reduce_sum(shard_sum_exp(row_max))
//   lse      = row_max + log(sum_exp)             loss_r  = lse - all_reduce_sum(shard_target_logit)
// and then calls softmax_cross_entropy_backward_shard with that lse. With one shard (offset 0,
// classes == total_classes) these reproduce the fused kernels above.
// Padding: a shard's rows are `classes` wide but only columns [0, valid) are real classes (valid < 0 means
// all); the vocabulary padding columns [valid, classes) take no part in max, sum or target, and get a zero
// gradient. valid may be 0 (a shard made only of padding): its max is -inf and its sum 0.
void cross_entropy_shard_max(const float* logits, float* row_max, int64_t rows, int64_t classes, int64_t valid = -1,
                             KernelScratch* scratch = nullptr);
void cross_entropy_shard_sum_exp(const float* logits, const float* row_max, float* sum_exp, int64_t rows,
                                 int64_t classes, int64_t valid = -1, KernelScratch* scratch = nullptr);
// target_logit[r] = logits[r, targets[r] - class_offset] when the target lies in this shard, else 0.
// CLEAVE_CHECKs every target against [-1, total_classes).
void cross_entropy_shard_target_logit(const float* logits, const int32_t* targets, int64_t class_offset,
                                      float* target_logit, int64_t rows, int64_t classes, int64_t total_classes,
                                      int64_t valid = -1);
// neg_index[r] = -(global index of the first column equal to row_max[r]), or -inf when none is: the max over
// the tp group (an all-reduce max) is minus the first arg-max of the whole row, as std::max_element picks it.
void cross_entropy_shard_argmax(const float* logits, const float* row_max, int64_t class_offset, float* neg_index,
                                int64_t rows, int64_t classes, int64_t valid = -1);
// dlogits = scale * (softmax - onehot), the onehot only where the target lies in this shard; ignored rows
// and padding columns are zero. dlogits may alias logits.
void softmax_cross_entropy_backward_shard(const float* logits, const int32_t* targets, int64_t class_offset,
                                          const float* lse, float scale, float* dlogits, int64_t rows, int64_t classes,
                                          int64_t total_classes, int64_t valid = -1, KernelScratch* scratch = nullptr);

// The same kernels over bf16 logits (bit patterns, cast.hpp; see the file comment); dlogits bf16 or f32, and may alias logits.
double softmax_cross_entropy_forward(const std::uint16_t* logits, const int32_t* targets, float* lse, int64_t rows,
                                     int64_t classes, KernelScratch* scratch = nullptr);
void cross_entropy_shard_max(const std::uint16_t* logits, float* row_max, int64_t rows, int64_t classes,
                             int64_t valid = -1, KernelScratch* scratch = nullptr);
void cross_entropy_shard_sum_exp(const std::uint16_t* logits, const float* row_max, float* sum_exp, int64_t rows,
                                 int64_t classes, int64_t valid = -1, KernelScratch* scratch = nullptr);
void cross_entropy_shard_target_logit(const std::uint16_t* logits, const int32_t* targets, int64_t class_offset,
                                      float* target_logit, int64_t rows, int64_t classes, int64_t total_classes,
                                      int64_t valid = -1);
void cross_entropy_shard_argmax(const std::uint16_t* logits, const float* row_max, int64_t class_offset, float* neg_index,
                                int64_t rows, int64_t classes, int64_t valid = -1);
void softmax_cross_entropy_backward_shard(const std::uint16_t* logits, const int32_t* targets, int64_t class_offset,
                                          const float* lse, float scale, std::uint16_t* dlogits, int64_t rows,
                                          int64_t classes, int64_t total_classes, int64_t valid = -1,
                                          KernelScratch* scratch = nullptr);
void softmax_cross_entropy_backward_shard(const std::uint16_t* logits, const int32_t* targets, int64_t class_offset,
                                          const float* lse, float scale, float* dlogits, int64_t rows,
                                          int64_t classes, int64_t total_classes, int64_t valid = -1,
                                          KernelScratch* scratch = nullptr);

}  // namespace cleave::kernels::cpu

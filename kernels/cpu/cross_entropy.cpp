// Fused softmax cross-entropy. See cross_entropy.hpp. Each row is read once for the max and once for the
// sum of exponentials (forward) and once more for the gradient (backward); no softmax is stored. Per-row
// losses are summed in row order, so the total does not depend on the thread count.
#include "kernels/cpu/cross_entropy.hpp"

#include <cmath>
#include <limits>
#include <vector>

#include "engine/core/error.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/vec_math.hpp"

namespace cleave::kernels::cpu {
namespace {

void check_targets(const char* op, const int32_t* targets, int64_t rows, int64_t classes) {
  for (int64_t r = 0; r < rows; ++r) {
    CLEAVE_CHECK(targets[r] >= -1 && targets[r] < classes,
                 "{}: target {} at row {} is out of range [0, {}) (number of classes {}; -1 marks an ignored row)", op,
                 targets[r], r, classes, classes);
  }
}

// One row of the backward (target t; dx may alias x).
void backward_row(const float* x, int32_t t, int64_t class_offset, float row_lse, float scale, float* dx,
                  int64_t classes, int64_t valid) {
  for (int64_t c = t < 0 ? 0 : valid; c < classes; ++c) dx[c] = 0.0f;  // padding columns and ignored rows
  if (t < 0) return;
  const int64_t local = static_cast<int64_t>(t) - class_offset;
  const bool here = local >= 0 && local < valid;
  const float x_t = here ? x[local] : 0.0f;
  detail::exp_scale_store(x, row_lse, scale, dx, valid);
  if (here) dx[local] = scale * (detail::exp_scalar(x_t - row_lse) - 1.0f);
}

}  // namespace

int64_t count_valid_targets(const int32_t* targets, int64_t rows) {
  CLEAVE_ASSERT(rows >= 0, "count_valid_targets: negative rows {}", rows);
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) count += targets[r] >= 0 ? 1 : 0;
  return count;
}

double softmax_cross_entropy_forward(const float* logits, const int32_t* targets, float* lse, int64_t rows,
                                     int64_t classes) {
  CLEAVE_ASSERT(rows >= 0 && classes > 0, "softmax_cross_entropy_forward: bad shape [{}, {}]", rows, classes);
  check_targets("softmax_cross_entropy_forward", targets, rows, classes);
  std::vector<double> loss(static_cast<size_t>(rows), 0.0);
  CLEAVE_PARALLEL_FOR(r, rows, detail::worth_parallel(rows * classes),
    const float* x = logits + r * classes;
    const float mx = detail::max_of(x, classes);
    const float sum = detail::exp_sum(x, mx, classes);
    const float row_lse = mx + std::log(sum);
    lse[r] = row_lse;
    const int32_t t = targets[r];
    loss[static_cast<size_t>(r)] = t >= 0 ? static_cast<double>(row_lse) - static_cast<double>(x[t]) : 0.0;)
  double total = 0.0;
  for (double l : loss) total += l;
  return total;
}

void softmax_cross_entropy_backward(const float* logits, const int32_t* targets, const float* lse, float scale,
                                    float* dlogits, int64_t rows, int64_t classes) {
  softmax_cross_entropy_backward_shard(logits, targets, 0, lse, scale, dlogits, rows, classes, classes);
}

namespace {
int64_t valid_columns(int64_t valid, int64_t classes) { return valid < 0 ? classes : valid; }
}  // namespace

void cross_entropy_shard_max(const float* logits, float* row_max, int64_t rows, int64_t classes, int64_t valid) {
  valid = valid_columns(valid, classes);
  CLEAVE_ASSERT(rows >= 0 && classes > 0 && valid <= classes, "cross_entropy_shard_max: bad shape [{}, {}] valid {}",
                rows, classes, valid);
  CLEAVE_PARALLEL_FOR(r, rows, detail::worth_parallel(rows * classes),
    row_max[r] = valid > 0 ? detail::max_of(logits + r * classes, valid) : -std::numeric_limits<float>::infinity();)
}

void cross_entropy_shard_sum_exp(const float* logits, const float* row_max, float* sum_exp, int64_t rows,
                                 int64_t classes, int64_t valid) {
  valid = valid_columns(valid, classes);
  CLEAVE_ASSERT(rows >= 0 && classes > 0 && valid <= classes,
                "cross_entropy_shard_sum_exp: bad shape [{}, {}] valid {}", rows, classes, valid);
  CLEAVE_PARALLEL_FOR(r, rows, detail::worth_parallel(rows * classes),
    sum_exp[r] = valid > 0 ? detail::exp_sum(logits + r * classes, row_max[r], valid) : 0.0f;)
}

void cross_entropy_shard_target_logit(const float* logits, const int32_t* targets, int64_t class_offset,
                                      float* target_logit, int64_t rows, int64_t classes, int64_t total_classes,
                                      int64_t valid) {
  valid = valid_columns(valid, classes);
  CLEAVE_ASSERT(rows >= 0 && classes > 0 && valid <= classes && class_offset >= 0 &&
                    class_offset + valid <= total_classes,
                "cross_entropy_shard_target_logit: shard [{}, {}) outside {} classes", class_offset,
                class_offset + valid, total_classes);
  check_targets("cross_entropy_shard_target_logit", targets, rows, total_classes);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t local = static_cast<int64_t>(targets[r]) - class_offset;
    target_logit[r] = (targets[r] >= 0 && local >= 0 && local < valid) ? logits[r * classes + local] : 0.0f;
  }
}

void cross_entropy_shard_argmax(const float* logits, const float* row_max, int64_t class_offset, float* neg_index,
                                int64_t rows, int64_t classes, int64_t valid) {
  valid = valid_columns(valid, classes);
  CLEAVE_ASSERT(rows >= 0 && classes > 0 && valid <= classes && class_offset >= 0,
                "cross_entropy_shard_argmax: bad shape [{}, {}] valid {}", rows, classes, valid);
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * classes;
    neg_index[r] = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < valid; ++c) {
      if (x[c] == row_max[r]) {
        neg_index[r] = -static_cast<float>(class_offset + c);
        break;
      }
    }
  }
}

void softmax_cross_entropy_backward_shard(const float* logits, const int32_t* targets, int64_t class_offset,
                                          const float* lse, float scale, float* dlogits, int64_t rows, int64_t classes,
                                          int64_t total_classes, int64_t valid) {
  valid = valid_columns(valid, classes);
  CLEAVE_ASSERT(rows >= 0 && classes > 0 && valid <= classes && class_offset >= 0 &&
                    class_offset + valid <= total_classes,
                "softmax_cross_entropy_backward: shard [{}, {}) outside {} classes (rows {})", class_offset,
                class_offset + valid, total_classes, rows);
  check_targets("softmax_cross_entropy_backward", targets, rows, total_classes);
  // dlogits may alias logits: every element is read before it is written, at the same index.
  CLEAVE_PARALLEL_FOR(r, rows, detail::worth_parallel(rows * classes),
    backward_row(logits + r * classes, targets[r], class_offset, lse[r], scale, dlogits + r * classes, classes,
                 valid);)
}

}  // namespace cleave::kernels::cpu

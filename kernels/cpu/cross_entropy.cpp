// Fused softmax cross-entropy. See cross_entropy.hpp. Each row is read once for the max and once for the
// sum of exponentials (forward) and once more for the gradient (backward); no softmax is stored. Per-row
// losses are summed in row order, so the total does not depend on the thread count.
//
// Each kernel is written once over the logits' element type: an f32 row is used in place, a bf16 row is widened
// into the calling thread's row block first (load_row) and a bf16 gradient row is computed in a second block and
// narrowed (out_row, store_row). The f32 arithmetic is the same code on the same values either way. The row blocks
// and the forward's per-row losses are the caller's KernelScratch (kernel_scratch.hpp): with the run's, a
// steady-state call allocates nothing.
#include "kernels/cpu/cross_entropy.hpp"

#include <cmath>
#include <limits>
#include <type_traits>

#include "engine/core/dtype.hpp"
#include "engine/core/error.hpp"
#include "kernels/cpu/cast.hpp"
#include "kernels/cpu/kernel_scratch.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/vec_math.hpp"

namespace cleave::kernels::cpu {
namespace {

// f32 floats of a thread's row block for rows of `n` elements: one row per bf16 tensor among T (logits) and D
// (their gradient), f32 rows being used in place.
template <class T, class D = float>
size_t row_floats(int64_t n) {
  const int bf16 = (std::is_same_v<T, std::uint16_t> ? 1 : 0) + (std::is_same_v<D, std::uint16_t> ? 1 : 0);
  return static_cast<size_t>(bf16 * n);
}

// A row of logits as f32: in place, or widened (exactly) into `buf` (the start of the thread's row block).
const float* load_row(const float* x, int64_t, float*) { return x; }
const float* load_row(const std::uint16_t* x, int64_t n, float* buf) {
  cast_bf16_to_f32_serial(x, buf, n);
  return buf;
}

// Where a gradient row is computed (the row itself, or `buf`: the thread's block past a widened logits row), and
// its store.
float* out_row(float* y, int64_t, float*) { return y; }
float* out_row(std::uint16_t*, int64_t, float* buf) { return buf; }
void store_row(const float*, float*, int64_t) {}
void store_row(const float* f, std::uint16_t* y, int64_t n) { cast_f32_to_bf16_serial(f, y, n); }

float element(const float* x, int64_t i) { return x[i]; }
float element(const std::uint16_t* x, int64_t i) { return bf16_to_float(x[i]); }

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

int64_t valid_columns(int64_t valid, int64_t classes) { return valid < 0 ? classes : valid; }

template <class T>
double forward(const T* logits, const int32_t* targets, float* lse, int64_t rows, int64_t classes,
               KernelScratch* scratch) {
  CLEAVE_ASSERT(rows >= 0 && classes > 0, "softmax_cross_entropy_forward: bad shape [{}, {}]", rows, classes);
  check_targets("softmax_cross_entropy_forward", targets, rows, classes);
  ScratchFor scratch_for(scratch);
  const KernelScratch::Lease lease =
      scratch_for.get().lease(static_cast<size_t>(rows) * sizeof(double), row_floats<T>(classes));
  double* loss = reinterpret_cast<double*>(lease.shared());  // every row's is written below
  CLEAVE_PARALLEL_FOR(r, rows, detail::worth_parallel(rows * classes),
    const float* x = load_row(logits + r * classes, classes, lease.thread_block());
    const float mx = detail::max_of(x, classes);
    const float sum = detail::exp_sum(x, mx, classes);
    const float row_lse = mx + std::log(sum);
    lse[r] = row_lse;
    const int32_t t = targets[r];
    loss[r] = t >= 0 ? static_cast<double>(row_lse) - static_cast<double>(x[t]) : 0.0;)
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) total += loss[r];
  return total;
}

template <class T>
void shard_max(const T* logits, float* row_max, int64_t rows, int64_t classes, int64_t valid, KernelScratch* scratch) {
  valid = valid_columns(valid, classes);
  CLEAVE_ASSERT(rows >= 0 && classes > 0 && valid <= classes, "cross_entropy_shard_max: bad shape [{}, {}] valid {}",
                rows, classes, valid);
  ScratchFor scratch_for(scratch);
  const KernelScratch::Lease lease = scratch_for.get().lease(0, row_floats<T>(valid));
  CLEAVE_PARALLEL_FOR(r, rows, detail::worth_parallel(rows * classes),
    row_max[r] = valid > 0 ? detail::max_of(load_row(logits + r * classes, valid, lease.thread_block()), valid)
                           : -std::numeric_limits<float>::infinity();)
}

template <class T>
void shard_sum_exp(const T* logits, const float* row_max, float* sum_exp, int64_t rows, int64_t classes,
                   int64_t valid, KernelScratch* scratch) {
  valid = valid_columns(valid, classes);
  CLEAVE_ASSERT(rows >= 0 && classes > 0 && valid <= classes,
                "cross_entropy_shard_sum_exp: bad shape [{}, {}] valid {}", rows, classes, valid);
  ScratchFor scratch_for(scratch);
  const KernelScratch::Lease lease = scratch_for.get().lease(0, row_floats<T>(valid));
  CLEAVE_PARALLEL_FOR(r, rows, detail::worth_parallel(rows * classes),
    sum_exp[r] = valid > 0 ? detail::exp_sum(load_row(logits + r * classes, valid, lease.thread_block()), row_max[r],
                                             valid)
                           : 0.0f;)
}

template <class T>
void shard_target_logit(const T* logits, const int32_t* targets, int64_t class_offset, float* target_logit,
                        int64_t rows, int64_t classes, int64_t total_classes, int64_t valid) {
  valid = valid_columns(valid, classes);
  CLEAVE_ASSERT(rows >= 0 && classes > 0 && valid <= classes && class_offset >= 0 &&
                    class_offset + valid <= total_classes,
                "cross_entropy_shard_target_logit: shard [{}, {}) outside {} classes", class_offset,
                class_offset + valid, total_classes);
  check_targets("cross_entropy_shard_target_logit", targets, rows, total_classes);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t local = static_cast<int64_t>(targets[r]) - class_offset;
    target_logit[r] = (targets[r] >= 0 && local >= 0 && local < valid) ? element(logits, r * classes + local) : 0.0f;
  }
}

template <class T>
void shard_argmax(const T* logits, const float* row_max, int64_t class_offset, float* neg_index, int64_t rows,
                  int64_t classes, int64_t valid) {
  valid = valid_columns(valid, classes);
  CLEAVE_ASSERT(rows >= 0 && classes > 0 && valid <= classes && class_offset >= 0,
                "cross_entropy_shard_argmax: bad shape [{}, {}] valid {}", rows, classes, valid);
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = logits + r * classes;
    neg_index[r] = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < valid; ++c) {
      if (element(x, c) == row_max[r]) {
        neg_index[r] = -static_cast<float>(class_offset + c);
        break;
      }
    }
  }
}

template <class T, class D>
void backward_shard(const T* logits, const int32_t* targets, int64_t class_offset, const float* lse, float scale,
                    D* dlogits, int64_t rows, int64_t classes, int64_t total_classes, int64_t valid,
                    KernelScratch* scratch) {
  valid = valid_columns(valid, classes);
  CLEAVE_ASSERT(rows >= 0 && classes > 0 && valid <= classes && class_offset >= 0 &&
                    class_offset + valid <= total_classes,
                "softmax_cross_entropy_backward: shard [{}, {}) outside {} classes (rows {})", class_offset,
                class_offset + valid, total_classes, rows);
  check_targets("softmax_cross_entropy_backward", targets, rows, total_classes);
  // dlogits may alias logits: every element is read before it is written, at the same index (a bf16 row is read
  // whole into the row block before its gradient is stored).
  ScratchFor scratch_for(scratch);
  const KernelScratch::Lease lease = scratch_for.get().lease(0, row_floats<T, D>(classes));
  const int64_t out_at = static_cast<int64_t>(row_floats<T>(classes));  // the gradient row past a widened x row
  CLEAVE_PARALLEL_FOR(r, rows, detail::worth_parallel(rows * classes),
    float* block = lease.thread_block();
    const float* x = load_row(logits + r * classes, classes, block);
    float* dx = out_row(dlogits + r * classes, classes, block + out_at);
    backward_row(x, targets[r], class_offset, lse[r], scale, dx, classes, valid);
    store_row(dx, dlogits + r * classes, classes);)
}

}  // namespace

int64_t count_valid_targets(const int32_t* targets, int64_t rows) {
  CLEAVE_ASSERT(rows >= 0, "count_valid_targets: negative rows {}", rows);
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) count += targets[r] >= 0 ? 1 : 0;
  return count;
}

double softmax_cross_entropy_forward(const float* logits, const int32_t* targets, float* lse, int64_t rows,
                                     int64_t classes, KernelScratch* scratch) {
  return forward(logits, targets, lse, rows, classes, scratch);
}
double softmax_cross_entropy_forward(const std::uint16_t* logits, const int32_t* targets, float* lse, int64_t rows,
                                     int64_t classes, KernelScratch* scratch) {
  return forward(logits, targets, lse, rows, classes, scratch);
}

void softmax_cross_entropy_backward(const float* logits, const int32_t* targets, const float* lse, float scale,
                                    float* dlogits, int64_t rows, int64_t classes, KernelScratch* scratch) {
  softmax_cross_entropy_backward_shard(logits, targets, 0, lse, scale, dlogits, rows, classes, classes, -1,
                                       scratch);
}

void cross_entropy_shard_max(const float* logits, float* row_max, int64_t rows, int64_t classes, int64_t valid,
                             KernelScratch* scratch) {
  shard_max(logits, row_max, rows, classes, valid, scratch);
}
void cross_entropy_shard_max(const std::uint16_t* logits, float* row_max, int64_t rows, int64_t classes,
                             int64_t valid, KernelScratch* scratch) {
  shard_max(logits, row_max, rows, classes, valid, scratch);
}

void cross_entropy_shard_sum_exp(const float* logits, const float* row_max, float* sum_exp, int64_t rows,
                                 int64_t classes, int64_t valid, KernelScratch* scratch) {
  shard_sum_exp(logits, row_max, sum_exp, rows, classes, valid, scratch);
}
void cross_entropy_shard_sum_exp(const std::uint16_t* logits, const float* row_max, float* sum_exp, int64_t rows,
                                 int64_t classes, int64_t valid, KernelScratch* scratch) {
  shard_sum_exp(logits, row_max, sum_exp, rows, classes, valid, scratch);
}

void cross_entropy_shard_target_logit(const float* logits, const int32_t* targets, int64_t class_offset,
                                      float* target_logit, int64_t rows, int64_t classes, int64_t total_classes,
                                      int64_t valid) {
  shard_target_logit(logits, targets, class_offset, target_logit, rows, classes, total_classes, valid);
}
void cross_entropy_shard_target_logit(const std::uint16_t* logits, const int32_t* targets, int64_t class_offset,
                                      float* target_logit, int64_t rows, int64_t classes, int64_t total_classes,
                                      int64_t valid) {
  shard_target_logit(logits, targets, class_offset, target_logit, rows, classes, total_classes, valid);
}

void cross_entropy_shard_argmax(const float* logits, const float* row_max, int64_t class_offset, float* neg_index,
                                int64_t rows, int64_t classes, int64_t valid) {
  shard_argmax(logits, row_max, class_offset, neg_index, rows, classes, valid);
}
void cross_entropy_shard_argmax(const std::uint16_t* logits, const float* row_max, int64_t class_offset,
                                float* neg_index, int64_t rows, int64_t classes, int64_t valid) {
  shard_argmax(logits, row_max, class_offset, neg_index, rows, classes, valid);
}

void softmax_cross_entropy_backward_shard(const float* logits, const int32_t* targets, int64_t class_offset,
                                          const float* lse, float scale, float* dlogits, int64_t rows, int64_t classes,
                                          int64_t total_classes, int64_t valid, KernelScratch* scratch) {
  backward_shard(logits, targets, class_offset, lse, scale, dlogits, rows, classes, total_classes, valid, scratch);
}
void softmax_cross_entropy_backward_shard(const std::uint16_t* logits, const int32_t* targets, int64_t class_offset,
                                          const float* lse, float scale, std::uint16_t* dlogits, int64_t rows,
                                          int64_t classes, int64_t total_classes, int64_t valid,
                                          KernelScratch* scratch) {
  backward_shard(logits, targets, class_offset, lse, scale, dlogits, rows, classes, total_classes, valid, scratch);
}
void softmax_cross_entropy_backward_shard(const std::uint16_t* logits, const int32_t* targets, int64_t class_offset,
                                          const float* lse, float scale, float* dlogits, int64_t rows,
                                          int64_t classes, int64_t total_classes, int64_t valid,
                                          KernelScratch* scratch) {
  backward_shard(logits, targets, class_offset, lse, scale, dlogits, rows, classes, total_classes, valid, scratch);
}

}  // namespace cleave::kernels::cpu

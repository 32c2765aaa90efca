// Checked entry point of sum_squares_many (sum_squares_many.hpp): per-tensor sum_squares passes into one
// array of sums, then the ordered total.
#include "kernels/cuda/sum_squares_many.hpp"

#include <algorithm>

#include "engine/cuda/cuda_check.hpp"
#include "kernels/cuda/elementwise.hpp"

namespace cleave::kernels::cuda {
namespace {

// Byte offset of the block partials after `count` per-tensor sums, kept 256-byte aligned.
std::size_t partials_offset(int count) { return (static_cast<std::size_t>(count) * sizeof(double) + 255) / 256 * 256; }

}  // namespace

std::size_t sum_squares_many_workspace_size(const int64_t* sizes, int count) {
  std::size_t partials = sum_squares_workspace_size(0);
  for (int i = 0; i < count; ++i) partials = std::max(partials, sum_squares_workspace_size(sizes[i]));
  return partials_offset(count) + partials;
}

void sum_squares_many(const float* const* xs, const int64_t* sizes, int count, double* out, void* workspace,
                      std::size_t workspace_bytes, cudaStream_t stream) {
  CLEAVE_ASSERT(count >= 0, "cuda sum_squares_many: negative count {}", count);
  const std::size_t needed = sum_squares_many_workspace_size(sizes, count);
  CLEAVE_ASSERT(workspace != nullptr && workspace_bytes >= needed,
                "cuda sum_squares_many: workspace of {} bytes, {} needed for {} tensors", workspace_bytes, needed,
                count);
  auto* sums = static_cast<double*>(workspace);
  void* partials = static_cast<char*>(workspace) + partials_offset(count);
  const std::size_t partial_bytes = workspace_bytes - partials_offset(count);
  // Stream order makes reusing one partials buffer for every tensor safe.
  for (int i = 0; i < count; ++i) sum_squares(xs[i], sizes[i], sums + i, partials, partial_bytes, stream);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_sum_in_order(sums, count, out, stream), "sum_in_order_kernel");
}

}  // namespace cleave::kernels::cuda

// CUDA fused softmax cross-entropy against kernels/cpu/cross_entropy on awkward shapes (2 classes up to a GPT-2
// vocabulary), with ignored rows (-1) and a row shifted by +100 (the max subtraction must keep it finite):
// lse and dlogits within 1e-5 over poisoned outputs, the loss sum within 1e-5 relative and bit-identical
// across runs, dlogits in place over the logits, and bad targets recorded (smallest row) and reported with the
// CPU kernel's message while the good rows' results stay right.
#include "kernels/cuda/cross_entropy.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "kernels/cpu/cross_entropy.hpp"
#include "kernels/cuda/index_status.hpp"
#include "tests/gpu/cuda/cuda_test_util.hpp"

namespace cleave::testing {
namespace {

namespace kc = kernels::cuda;

class CudaCrossEntropy : public CudaTest, public ::testing::WithParamInterface<std::tuple<int64_t, int64_t>> {
 protected:
  std::vector<int32_t> targets(int64_t rows, int64_t classes) {
    auto t = random_ints(static_cast<size_t>(rows), 0, static_cast<int32_t>(classes - 1));
    for (size_t r = 1; r < t.size(); r += 7) t[r] = -1;  // ignored rows
    return t;
  }
};

TEST_P(CudaCrossEntropy, ForwardAndBackwardMatchCpu) {
  const auto [rows, classes] = GetParam();
  auto logits = random_floats(static_cast<size_t>(rows * classes), -6.0f, 6.0f);
  for (int64_t c = 0; c < classes; ++c) logits[static_cast<size_t>(c)] += 100.0f;
  const auto tgt = targets(rows, classes);
  std::vector<float> lse(static_cast<size_t>(rows));
  const double want_loss =
      kernels::cpu::softmax_cross_entropy_forward(logits.data(), tgt.data(), lse.data(), rows, classes);
  const float scale =
      1.0f / static_cast<float>(std::max<int64_t>(1, kernels::cpu::count_valid_targets(tgt.data(), rows)));
  std::vector<float> dlogits(logits.size());
  kernels::cpu::softmax_cross_entropy_backward(logits.data(), tgt.data(), lse.data(), scale, dlogits.data(), rows,
                                               classes);

  Tensor d_logits = upload_f32(logits);
  Tensor d_targets = upload(tgt, DType::kI32);
  Tensor d_lse = poisoned(rows);
  Tensor loss = poisoned(2, DType::kI32);  // one double
  Tensor status = poisoned(1, DType::kI32);
  auto* status_ptr = static_cast<uint32_t*>(status.raw_data());
  kc::reset_index_status(status_ptr, stream());
  const std::size_t ws_bytes = kc::softmax_cross_entropy_forward_workspace_size(rows);
  Tensor ws = workspace(ws_bytes);
  kc::softmax_cross_entropy_forward(d_logits.data<float>(), d_targets.data<int32_t>(), d_lse.data<float>(),
                                    static_cast<double*>(loss.raw_data()), status_ptr, rows, classes, ws.raw_data(),
                                    ws_bytes, stream());
  expect_close(download_f32(d_lse), lse, kF32Tolerance, "cross-entropy lse");
  const double got_loss = download<double>(loss)[0];
  EXPECT_NEAR(got_loss, want_loss, 1e-5 * std::fabs(want_loss)) << "cross-entropy loss sum";
  EXPECT_GT(std::fabs(want_loss), 0.0);
  kc::softmax_cross_entropy_forward(d_logits.data<float>(), d_targets.data<int32_t>(), d_lse.data<float>(),
                                    static_cast<double*>(loss.raw_data()), status_ptr, rows, classes, ws.raw_data(),
                                    ws_bytes, stream());
  EXPECT_EQ(download<double>(loss)[0], got_loss) << "the loss sum is not deterministic";
  EXPECT_FALSE(kc::read_index_status(status_ptr, stream()).has_value());

  Tensor c_lse = upload_f32(lse);  // compare the backward on its own
  Tensor d_dlogits = poisoned(rows * classes);
  kc::softmax_cross_entropy_backward(d_logits.data<float>(), d_targets.data<int32_t>(), c_lse.data<float>(), scale,
                                     d_dlogits.data<float>(), status_ptr, rows, classes, stream());
  expect_close(download_f32(d_dlogits), dlogits, kF32Tolerance, "cross-entropy dlogits");
  kc::softmax_cross_entropy_backward(d_logits.data<float>(), d_targets.data<int32_t>(), c_lse.data<float>(), scale,
                                     d_logits.data<float>(), status_ptr, rows, classes, stream());  // in place
  expect_close(download_f32(d_logits), dlogits, kF32Tolerance, "cross-entropy dlogits in place");
  kc::check_targets_status(status_ptr, d_targets.data<int32_t>(), classes, "softmax_cross_entropy", stream());
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaCrossEntropy,
                         ::testing::Values(std::make_tuple(int64_t{1}, int64_t{2}),
                                           std::make_tuple(int64_t{7}, int64_t{33}),
                                           std::make_tuple(int64_t{300}, int64_t{129}),
                                           std::make_tuple(int64_t{64}, int64_t{1000}),
                                           std::make_tuple(int64_t{5}, int64_t{50257})));

using CudaCrossEntropyErrors = CudaTest;

TEST_F(CudaCrossEntropyErrors, BadTargetsAreRecordedAndReported) {
  const int64_t rows = 9, classes = 17;
  const auto logits = random_floats(static_cast<size_t>(rows * classes));
  auto tgt = random_ints(static_cast<size_t>(rows), 0, classes - 1);
  tgt[5] = -4;
  tgt[3] = static_cast<int32_t>(classes);
  Tensor d_logits = upload_f32(logits);
  Tensor d_targets = upload(tgt, DType::kI32);
  Tensor d_lse = poisoned(rows);
  Tensor loss = poisoned(2, DType::kI32);
  Tensor status = poisoned(1, DType::kI32);
  auto* status_ptr = static_cast<uint32_t*>(status.raw_data());
  kc::reset_index_status(status_ptr, stream());
  Tensor ws = workspace(kc::softmax_cross_entropy_forward_workspace_size(rows));
  kc::softmax_cross_entropy_forward(d_logits.data<float>(), d_targets.data<int32_t>(), d_lse.data<float>(),
                                    static_cast<double*>(loss.raw_data()), status_ptr, rows, classes, ws.raw_data(),
                                    kc::softmax_cross_entropy_forward_workspace_size(rows), stream());
  EXPECT_EQ(kc::read_index_status(status_ptr, stream()), std::optional<int64_t>(3));
  try {
    kc::check_targets_status(status_ptr, d_targets.data<int32_t>(), classes, "softmax_cross_entropy_forward", stream());
    FAIL() << "a bad target was not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("target 17 at row 3 is out of range [0, 17)"), std::string::npos) << e.what();
  }
  // The loss counts the good rows only (bad rows are treated as ignored).
  auto good = tgt;
  good[5] = -1;
  good[3] = -1;
  std::vector<float> lse(static_cast<size_t>(rows));
  const double want =
      kernels::cpu::softmax_cross_entropy_forward(logits.data(), good.data(), lse.data(), rows, classes);
  EXPECT_NEAR(download<double>(loss)[0], want, 1e-5 * std::fabs(want));
  expect_close(download_f32(d_lse), lse, kF32Tolerance, "lse with bad targets");
}

}  // namespace
}  // namespace cleave::testing

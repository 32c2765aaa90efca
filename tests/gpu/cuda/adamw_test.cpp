// CUDA AdamW against kernels/cpu/adamw over three steps (bias correction changes each step) with weight decay,
// on sizes that are not multiples of the CPU vector width: param, m and v must be bit-identical to the CPU
// kernel (same host-computed constants, same correctly rounded operations, no FMA contraction), and the
// optional bf16 copy must equal cleave::float_to_bf16 of the updated f32 weights.
#include "kernels/cuda/adamw.hpp"

#include <gtest/gtest.h>

#include "kernels/cpu/adamw.hpp"
#include "tests/gpu/cuda/cuda_test_util.hpp"

namespace cleave::testing::adamw_test {
namespace {

namespace kc = kernels::cuda;

class CudaAdamW : public CudaTest, public ::testing::WithParamInterface<int64_t> {};

TEST_P(CudaAdamW, ThreeStepsAreBitIdenticalToCpu) {
  const int64_t n = GetParam();
  const float lr = 3e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
  std::vector<float> param = random_floats(static_cast<size_t>(n));
  std::vector<float> m(param.size(), 0.0f), v(param.size(), 0.0f);
  Tensor d_param = upload_f32(param);
  Tensor d_m = upload_f32(m);
  Tensor d_v = upload_f32(v);
  Tensor d_bf16 = poisoned(n, DType::kBF16);
  for (int64_t step = 1; step <= 3; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    const auto grad = random_floats(static_cast<size_t>(n), -0.5f, 0.5f);
    kernels::cpu::adamw_update(param.data(), grad.data(), m.data(), v.data(), n, lr, beta1, beta2, eps, weight_decay,
                               step);
    Tensor d_grad = upload_f32(grad);
    kc::adamw_update(d_param.data<float>(), d_grad.data<float>(), d_m.data<float>(), d_v.data<float>(), n, lr, beta1,
                     beta2, eps, weight_decay, step, static_cast<__nv_bfloat16*>(d_bf16.raw_data()), stream());
    expect_bitwise_equal(download_f32(d_param), param, "adamw param");
    expect_bitwise_equal(download_f32(d_m), m, "adamw m");
    expect_bitwise_equal(download_f32(d_v), v, "adamw v");
    expect_bitwise_equal(download_bf16(d_bf16), round_to_bf16(param), "adamw bf16 copy");
  }
  // Without a bf16 copy the copy buffer is left alone.
  const auto before = download<std::uint16_t>(d_bf16);
  Tensor d_grad = upload_f32(random_floats(static_cast<size_t>(n)));
  kc::adamw_update(d_param.data<float>(), d_grad.data<float>(), d_m.data<float>(), d_v.data<float>(), n, lr, beta1,
                   beta2, eps, weight_decay, 4, nullptr, stream());
  EXPECT_EQ(download<std::uint16_t>(d_bf16), before);
  EXPECT_THROW(kc::adamw_update(d_param.data<float>(), d_grad.data<float>(), d_m.data<float>(), d_v.data<float>(), n,
                                lr, 1.0f, beta2, eps, weight_decay, 5, nullptr, stream()),
               Error);
}

INSTANTIATE_TEST_SUITE_P(Sizes, CudaAdamW, ::testing::Values(1, 13, 4099, 1000003));

}  // namespace
}  // namespace cleave::testing::adamw_test

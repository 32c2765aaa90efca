// Seam parity of the optimizer updates (ops::adamw_update, ops::sgd_update) on cuda:0 against the CPU backend, three
// steps each on odd sizes, with f32 and bf16 gradients (f32 master weights and state always).
//
// Tolerance 0 (equal values) throughout: both backends take AdamW's host constants from
// kernels/adamw_constants.hpp and run the CPU kernels' operation order in correctly rounded f32 (the CUDA kernels
// use __fadd_rn/__fmul_rn/..., so nvcc cannot contract into FMAs; the CPU build targets x86-64 without FMA), and
// a bf16 gradient is widened exactly on both sides.
#include "tests/gpu/ops/parity_util.hpp"

namespace cleave::testing {
namespace {

using OptimParity = OpsParity;

const std::int64_t kSizes[] = {1, 37, 4099};

TEST_F(OptimParity, AdamWMatchesCpuBitForBit) {
  for (DType grad_dtype : {DType::kF32, DType::kBF16}) {
    for (std::int64_t n : kSizes) {
      const std::string what = "adamw n=" + std::to_string(n) + " grad " + std::string(dtype_name(grad_dtype));
      Tensor param = random(Shape{n}, DType::kF32), m = random(Shape{n}, DType::kF32, -0.1f, 0.1f);
      Tensor v = random(Shape{n}, DType::kF32, 0.0f, 0.01f);
      Tensor gpu_param = to_gpu(param), gpu_m = to_gpu(m), gpu_v = to_gpu(v);
      for (std::int64_t step = 1; step <= 3; ++step) {
        const Tensor grad = random(Shape{n}, grad_dtype);
        const ops::AdamWHyper hyper{.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                                    .step = step};
        ops::adamw_update(cpu(), param, grad, m, v, hyper);
        ops::adamw_update(gpu(), gpu_param, to_gpu(grad), gpu_m, gpu_v, hyper);
      }
      expect_close(param, gpu_param, 0.0, what + " param");
      expect_close(m, gpu_m, 0.0, what + " m");
      expect_close(v, gpu_v, 0.0, what + " v");
    }
  }
}

TEST_F(OptimParity, SgdMatchesCpuBitForBit) {
  struct Variant {
    float momentum, weight_decay;
    bool nesterov;
  };
  for (const Variant& variant : {Variant{0.0f, 0.0f, false}, Variant{0.0f, 0.01f, false}, Variant{0.9f, 0.01f, false},
                                 Variant{0.9f, 0.0f, true}, Variant{0.8f, 0.05f, true}}) {
    for (DType grad_dtype : {DType::kF32, DType::kBF16}) {
      for (std::int64_t n : kSizes) {
        const std::string what = "sgd momentum " + std::to_string(variant.momentum) + " decay " +
                                 std::to_string(variant.weight_decay) + (variant.nesterov ? " nesterov" : "") +
                                 " n=" + std::to_string(n) + " grad " + std::string(dtype_name(grad_dtype));
        Tensor param = random(Shape{n}, DType::kF32);
        Tensor buf = empty_cpu(Shape{n}, DType::kF32);  // first_step writes it before reading
        Tensor gpu_param = to_gpu(param), gpu_buf = poisoned_gpu(Shape{n}, DType::kF32);
        const bool has_momentum = variant.momentum != 0.0f;
        for (int step = 0; step < 3; ++step) {
          const Tensor grad = random(Shape{n}, grad_dtype);
          const ops::SgdHyper hyper{.lr = 0.05f, .momentum = variant.momentum, .weight_decay = variant.weight_decay,
                                    .nesterov = variant.nesterov, .first_step = step == 0};
          ops::sgd_update(cpu(), param, grad, has_momentum ? buf : Tensor(), hyper);
          ops::sgd_update(gpu(), gpu_param, to_gpu(grad), has_momentum ? gpu_buf : Tensor(), hyper);
        }
        expect_close(param, gpu_param, 0.0, what + " param");
        if (has_momentum) expect_close(buf, gpu_buf, 0.0, what + " momentum_buf");
      }
    }
  }
}

}  // namespace
}  // namespace cleave::testing

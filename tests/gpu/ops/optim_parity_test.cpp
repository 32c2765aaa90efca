// Seam parity of the optimizer updates (ops::adamw_update, ops::sgd_update, and the multi-tensor slots the trainer
// calls, ops::adamw_update_many / sgd_update_many: the CPU's one OpenMP team over every item against CUDA's launch
// per item) on cuda:0 against the CPU backend, three steps each on odd sizes, with f32 and bf16 gradients (f32
// master weights and state always).
//
// Tolerance 0 (equal values) throughout: both backends take AdamW's host constants from
// kernels/adamw_constants.hpp and run the CPU kernels' operation order in correctly rounded f32 (the CUDA kernels
// use __fadd_rn/__fmul_rn/..., so nvcc cannot contract into FMAs; the CPU build targets x86-64 without FMA), and
// a bf16 gradient is widened exactly on both sides.
#include <vector>

#include "tests/gpu/ops/parity_util.hpp"

namespace cleave::testing::optim_parity_test {
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

// The multi-tensor slots: items of sizes 1, 37 and 4099 with their own weight decays (one of them 0) and gradients
// of both dtypes in one call, three steps; every item bit for bit.
TEST_F(OptimParity, ManyTensorUpdatesMatchCpuBitForBit) {
  const float decays[] = {0.1f, 0.0f, 0.03f};
  const DType grad_dtypes[] = {DType::kF32, DType::kBF16, DType::kF32};
  std::vector<Tensor> param, m, v, buf, gpu_param, gpu_m, gpu_v, gpu_buf;
  for (std::size_t i = 0; i < 3; ++i) {
    const Shape shape{kSizes[i]};
    param.push_back(random(shape, DType::kF32));
    m.push_back(random(shape, DType::kF32, -0.1f, 0.1f));
    v.push_back(random(shape, DType::kF32, 0.0f, 0.01f));
    buf.push_back(empty_cpu(shape, DType::kF32));  // first_step writes it before reading
    gpu_param.push_back(to_gpu(param[i]));
    gpu_m.push_back(to_gpu(m[i]));
    gpu_v.push_back(to_gpu(v[i]));
    gpu_buf.push_back(poisoned_gpu(shape, DType::kF32));
  }
  std::vector<Tensor> sgd_param = param, gpu_sgd_param;
  for (std::size_t i = 0; i < 3; ++i) {
    sgd_param[i] = random(Shape{kSizes[i]}, DType::kF32);
    gpu_sgd_param.push_back(to_gpu(sgd_param[i]));
  }
  for (std::int64_t step = 1; step <= 3; ++step) {
    std::vector<ops::AdamWItem> adamw, gpu_adamw;
    std::vector<ops::SgdItem> sgd, gpu_sgd;
    for (std::size_t i = 0; i < 3; ++i) {
      const Tensor grad = random(Shape{kSizes[i]}, grad_dtypes[i]);
      const Tensor gpu_grad = to_gpu(grad);
      adamw.push_back({param[i], grad, m[i], v[i], decays[i]});
      gpu_adamw.push_back({gpu_param[i], gpu_grad, gpu_m[i], gpu_v[i], decays[i]});
      sgd.push_back({sgd_param[i], grad, buf[i], decays[i]});
      gpu_sgd.push_back({gpu_sgd_param[i], gpu_grad, gpu_buf[i], decays[i]});
    }
    const ops::AdamWHyper hyper{.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .step = step};
    ops::adamw_update_many(cpu(), adamw, hyper);
    ops::adamw_update_many(gpu(), gpu_adamw, hyper);
    const ops::SgdHyper sgd_hyper{.lr = 0.05f, .momentum = 0.9f, .nesterov = true, .first_step = step == 1};
    ops::sgd_update_many(cpu(), sgd, sgd_hyper);
    ops::sgd_update_many(gpu(), gpu_sgd, sgd_hyper);
  }
  for (std::size_t i = 0; i < 3; ++i) {
    const std::string what = "item " + std::to_string(i) + " n=" + std::to_string(kSizes[i]);
    expect_close(param[i], gpu_param[i], 0.0, "adamw_update_many " + what + " param");
    expect_close(m[i], gpu_m[i], 0.0, "adamw_update_many " + what + " m");
    expect_close(v[i], gpu_v[i], 0.0, "adamw_update_many " + what + " v");
    expect_close(sgd_param[i], gpu_sgd_param[i], 0.0, "sgd_update_many " + what + " param");
    expect_close(buf[i], gpu_buf[i], 0.0, "sgd_update_many " + what + " momentum_buf");
  }
}

}  // namespace
}  // namespace cleave::testing::optim_parity_test

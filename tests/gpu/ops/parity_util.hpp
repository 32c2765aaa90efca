// Seam parity tests (tests/gpu/ops, label `gpu`; ggml's test-backend-ops is the pattern): each CUDA slot is
// called through ops:: and compared with the same call on the CPU backend, the numerical reference.
//
// The fixture skips with the reason when no CUDA device is visible; otherwise it owns a stream, a caching
// allocator and the device resources on cuda:0, and two contexts: cpu() (the CPU backend) and gpu(). Inputs are
// fresh random CPU tensors (a new seed per test, printed on failure; bf16 inputs are rounded to bf16 first),
// copied to the GPU; GPU outputs start poisoned (every byte 0xFF: NaN in f32 and bf16, -1 in i32) so an
// element a kernel forgets to write fails. expect_close refuses an all-zero reference, so no check can pass on
// zeros.
//
// NOTE (merge): the attention/relu/softmax/sgd helper (branch cuda-a) writes this header too; this is a
// minimal implementation of the same API so the loss, embedding and convolution parity tests build on their
// own. Keep one at merge.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/core/dtype.hpp"
#include "engine/core/tensor.hpp"
#include "engine/cuda/caching_allocator.hpp"
#include "engine/cuda/copy.hpp"
#include "engine/cuda/device.hpp"
#include "engine/cuda/stream.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::testing {

class OpsParity : public ::testing::Test {
 protected:
  void SetUp() override {
    const cuda::DeviceProbe probe = cuda::probe_devices();
    if (probe.count == 0) {
      GTEST_SKIP() << "no CUDA device visible (" << probe.reason << "): the seam parity tests need a GPU";
    }
    cuda::set_device(0);
    stream_ = std::make_unique<cuda::CudaStream>(0);
    allocator_ = std::make_unique<cuda::CudaCachingAllocator>(0, stream_->native());
    resources_ = ops::make_device_resources(Device::cuda(0));
    gpu_.device = Device::cuda(0);
    gpu_.allocator = allocator_.get();
    gpu_.stream = &stream_->stream();
    gpu_.resources = resources_.get();
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    seed_trace_ = std::make_unique<::testing::ScopedTrace>(__FILE__, __LINE__, "random seed " + std::to_string(seed_));
  }
  void TearDown() override {
    if (stream_) stream_->synchronize();
    resources_.reset();
    allocator_.reset();  // before the stream it is ordered on
    stream_.reset();
    seed_trace_.reset();
  }

  const ops::Context& cpu() const { return cpu_; }
  const ops::Context& gpu() const { return gpu_; }

  // A CPU tensor of uniform values in [lo, hi) (bf16: rounded to bf16); i32: integers in [lo, hi] inclusive.
  Tensor random(const Shape& shape, DType dtype, float lo = -1.0f, float hi = 1.0f) {
    Tensor t = empty_cpu(shape, dtype);
    const auto n = static_cast<std::size_t>(t.numel());
    if (dtype == DType::kI32) {
      std::uniform_int_distribution<std::int32_t> dist(static_cast<std::int32_t>(lo), static_cast<std::int32_t>(hi));
      for (std::size_t i = 0; i < n; ++i) t.data<std::int32_t>()[i] = dist(rng_);
      return t;
    }
    std::uniform_real_distribution<float> dist(lo, hi);
    for (std::size_t i = 0; i < n; ++i) {
      const float v = dist(rng_);
      if (dtype == DType::kBF16) {
        static_cast<std::uint16_t*>(t.raw_data())[i] = float_to_bf16(v);
      } else {
        t.data<float>()[i] = v;
      }
    }
    return t;
  }

  Tensor to_gpu(const Tensor& t) {
    return cuda::to_device(t, *allocator_, MemoryCategory::kActivations, stream_->stream());
  }
  Tensor to_cpu(const Tensor& t) { return cuda::to_host(t, stream_->stream()); }
  Tensor poisoned_gpu(const Shape& shape, DType dtype) {
    Tensor t = Tensor::empty(shape, dtype, MemoryCategory::kActivations, *allocator_);
    cuda::fill_bytes_async(t, 0xFF, stream_->stream());
    return t;
  }
  Tensor empty_cpu(const Shape& shape, DType dtype) {
    return Tensor::empty(shape, dtype, MemoryCategory::kActivations, cpu_allocator());
  }

  // |gpu - cpu| <= tol * (|cpu| + max|cpu|) element by element (relative for large elements, absolute at tol
  // times the tensor's scale near zero, where a different summation order moves the result by more than
  // tol * |cpu|); NaN is wrong; tol 0 demands identical values; i32 tensors must be equal. The reference must
  // not be all zero.
  void expect_close(const Tensor& cpu_ref, const Tensor& gpu_out, double tol, const std::string& what) {
    ASSERT_EQ(cpu_ref.numel(), gpu_out.numel()) << what;
    ASSERT_EQ(cpu_ref.dtype(), gpu_out.dtype()) << what;
    const Tensor got_t = gpu_out.device().is_cuda() ? to_cpu(gpu_out) : gpu_out;
    std::vector<double> want, got;
    if (cpu_ref.dtype() == DType::kI32) {
      for (std::int32_t v : cpu_ref.span<std::int32_t>()) want.push_back(v);
      for (std::int32_t v : got_t.span<std::int32_t>()) got.push_back(v);
      tol = 0.0;
    } else {
      for (float v : cpu_ref.to_floats()) want.push_back(v);
      for (float v : got_t.to_floats()) got.push_back(v);
    }
    double scale = 0.0;
    for (double w : want) scale = std::max(scale, std::fabs(w));
    if (!want.empty()) {
      EXPECT_GT(scale, 0.0) << what << ": the reference is all zero, the check could not fail";
    }
    std::int64_t wrong = 0;
    double worst = 0.0;
    std::string first;
    for (std::size_t i = 0; i < want.size(); ++i) {
      const double err = std::fabs(got[i] - want[i]);
      if (std::isfinite(err)) worst = std::max(worst, err / (std::fabs(want[i]) + scale));
      if (!(err <= tol * (std::fabs(want[i]) + scale)) && !(tol == 0.0 && got[i] == want[i])) {
        if (wrong < 5) {
          first += " [" + std::to_string(i) + "] gpu " + std::to_string(got[i]) + " cpu " +
                   std::to_string(want[i]) + ";";
        }
        ++wrong;
      }
    }
    EXPECT_EQ(wrong, 0) << what << ": " << wrong << " of " << want.size() << " elements off by more than " << tol
                        << " (scale " << scale << "):" << first;
    RecordProperty(what, std::to_string(worst));  // the measured error, in the gtest XML
  }

  unsigned int seed_ = 0;

 private:
  ops::Context cpu_;
  ops::Context gpu_;
  std::unique_ptr<cuda::CudaStream> stream_;
  std::unique_ptr<cuda::CudaCachingAllocator> allocator_;
  std::unique_ptr<ops::DeviceResources> resources_;
  std::mt19937_64 rng_;
  std::unique_ptr<::testing::ScopedTrace> seed_trace_;
};

}  // namespace cleave::testing

// The seam parity fixture (label `gpu`, binary gpu_ops_test; ggml's test-backend-ops is the pattern): every CUDA
// slot is called through `ops::` on a CUDA context and compared with the same call on the CPU context, whose
// backend is the numerical reference (docs/ops.md; bf16 storage, f32 arithmetic and statistics).
//
// What it gives a test: cpu() and gpu() contexts (cuda:0, its own stream, a caching allocator ordered on that
// stream, make_device_resources); fresh random CPU inputs (a new seed per test, printed on failure) in f32, bf16
// or i32; synchronous copies both ways; GPU outputs poisoned with 0xFF bytes (NaN in f32 and bf16, -1 in i32),
// so an element a slot forgets to write fails; and expect_close, which counts wrong elements relative to the
// tensor's scale and refuses an all-zero reference. Every test skips with the reason when no CUDA device is
// visible. (Branch cuda-b carries a subset of this header with the same API; keep this one at merge.)
//
// Writing a test: draw inputs with random(), run ops::<op>(cpu(), ...) on them and ops::<op>(gpu(), ...) on
// to_gpu() copies (outputs from poisoned_gpu), then expect_close(cpu_out, gpu_out, tol, "what") with the
// tolerance and its reason stated in a comment.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/core/allocator.hpp"
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
  std::mt19937_64& rng() { return rng_; }

  // A CPU tensor of uniform values in [lo, hi) (bf16: drawn in f32 and rounded to nearest even); i32: uniform
  // integers in [lo, hi] inclusive (token ids, targets).
  Tensor random(const Shape& shape, DType dtype, float lo = -1.0f, float hi = 1.0f) {
    if (dtype == DType::kI32) {
      Tensor t = empty_cpu(shape, dtype);
      std::uniform_int_distribution<std::int32_t> ints(static_cast<std::int32_t>(lo), static_cast<std::int32_t>(hi));
      for (std::int32_t& v : t.span<std::int32_t>()) v = ints(rng_);
      return t;
    }
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> values(static_cast<std::size_t>(shape.numel()));
    for (float& v : values) v = dist(rng_);
    return from_floats(values, shape, dtype);
  }

  // A CPU tensor holding `values` as `dtype` (bf16: rounded to nearest even).
  static Tensor from_floats(const std::vector<float>& values, const Shape& shape, DType dtype) {
    Tensor t = Tensor::empty(shape, dtype, MemoryCategory::kActivations, cpu_allocator());
    CLEAVE_ASSERT(static_cast<std::size_t>(t.numel()) == values.size(), "from_floats: {} values for {}", values.size(),
                  shape.str());
    if (dtype == DType::kBF16) {
      auto* bits = static_cast<std::uint16_t*>(t.raw_data());
      for (std::size_t i = 0; i < values.size(); ++i) bits[i] = float_to_bf16(values[i]);
    } else {
      CLEAVE_ASSERT(dtype == DType::kF32, "from_floats: {} is not a float dtype", dtype_name(dtype));
      std::copy(values.begin(), values.end(), t.data<float>());
    }
    return t;
  }

  // Synchronous copies: the data is there when they return.
  Tensor to_gpu(const Tensor& t) { return cuda::to_device(t, *allocator_, MemoryCategory::kActivations, stream()); }
  Tensor to_cpu(const Tensor& t) { return cuda::to_host(t, stream()); }

  // A GPU tensor with every byte 0xFF (NaN in f32 and bf16), filled before it is returned.
  Tensor poisoned_gpu(const Shape& shape, DType dtype) {
    Tensor t = Tensor::empty(shape, dtype, MemoryCategory::kActivations, *allocator_);
    cuda::fill_bytes_async(t, 0xff, stream());
    stream_->synchronize();
    return t;
  }

  static Tensor empty_cpu(const Shape& shape, DType dtype) {
    return Tensor::empty(shape, dtype, MemoryCategory::kActivations, cpu_allocator());
  }

  // |gpu - cpu| <= tol * (|cpu| + max|cpu|) element by element: relative for large elements and absolute at tol
  // times the tensor's scale (its largest finite magnitude) near zero, where a different summation order
  // legitimately moves a result by more than tol * |cpu|. Equal values always pass (tol 0 demands them, and an
  // infinite reference must be matched exactly). NaN (an unwritten poisoned element) or a size mismatch is
  // wrong; an all-zero reference is refused, so a slot that writes nothing cannot pass. f32 and bf16 on either
  // side; i32 tensors must be equal.
  void expect_close(const Tensor& cpu_ref, const Tensor& gpu_out, double tol, const std::string& what) {
    ASSERT_TRUE(cpu_ref.device().is_cpu()) << what << ": the reference must be a CPU tensor";
    ASSERT_EQ(cpu_ref.numel(), gpu_out.numel()) << what << ": " << cpu_ref.shape().str() << " vs "
                                                << gpu_out.shape().str();
    ASSERT_EQ(cpu_ref.dtype() == DType::kI32, gpu_out.dtype() == DType::kI32) << what << ": i32 against a float";
    const Tensor host = gpu_out.device().is_cpu() ? gpu_out : to_cpu(gpu_out);
    std::vector<double> want, got;
    if (cpu_ref.dtype() == DType::kI32) {
      for (std::int32_t v : cpu_ref.span<std::int32_t>()) want.push_back(v);
      for (std::int32_t v : host.span<std::int32_t>()) got.push_back(v);
      tol = 0.0;
    } else {
      for (float v : cpu_ref.to_floats()) want.push_back(v);
      for (float v : host.to_floats()) got.push_back(v);
    }
    double scale = 0.0;
    for (double w : want) {
      if (std::isfinite(w)) scale = std::max(scale, std::fabs(w));
    }
    if (!want.empty()) {
      ASSERT_GT(scale, 0.0) << what << ": the reference is all zero, the check could not fail";
    }
    std::int64_t wrong = 0;
    double worst = 0.0;
    std::string first;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double g = got[i], w = want[i];
      if (g == w) continue;
      const double error = std::isfinite(w) ? std::fabs(g - w) / (std::fabs(w) + scale) : INFINITY;
      if (!std::isfinite(w) || !(std::fabs(g - w) <= tol * (std::fabs(w) + scale))) {
        if (wrong < 5) {
          first += " [" + std::to_string(i) + "] gpu " + std::to_string(g) + " cpu " + std::to_string(w) + ";";
        }
        ++wrong;
      }
      worst = std::isnan(error) ? INFINITY : std::max(worst, error);
    }
    EXPECT_EQ(wrong, 0) << what << ": " << wrong << " of " << got.size() << " elements off by more than tol " << tol
                        << " (scale " << scale << ", worst relative error " << worst << "):" << first;
    RecordProperty(what + " worst_error", std::to_string(worst));
  }

  unsigned int seed_ = 0;

 private:
  const Stream& stream() const { return stream_->stream(); }

  ops::Context cpu_;
  ops::Context gpu_;
  std::unique_ptr<cuda::CudaStream> stream_;
  std::unique_ptr<cuda::CudaCachingAllocator> allocator_;
  std::unique_ptr<ops::DeviceResources> resources_;
  std::mt19937_64 rng_;
  std::unique_ptr<::testing::ScopedTrace> seed_trace_;
};

}  // namespace cleave::testing

// Shared pieces of the CUDA kernel tests (label `gpu`): a fixture that skips with the reason when no CUDA device
// is visible, owns a stream and a caching allocator on cuda:0, and moves data between host and device; fresh
// random inputs (a new seed per test, printed on failure); poisoned outputs (every byte 0xFF: NaN in f32 and
// bf16), so an element a kernel forgets to write fails the comparison; and a tolerance check that reports the
// number of wrong elements and refuses an all-zero reference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/core/dtype.hpp"
#include "engine/core/tensor.hpp"
#include "engine/cuda/caching_allocator.hpp"
#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/device.hpp"
#include "engine/cuda/stream.hpp"

namespace cleave::testing {

// Per-dtype tolerances (relative to the reference's magnitude; see expect_close).
inline constexpr double kF32Tolerance = 1e-5;
inline constexpr double kBF16Tolerance = 1e-2;

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const cuda::DeviceProbe probe = cuda::probe_devices();
    if (probe.count == 0) {
      GTEST_SKIP() << "no CUDA device visible (" << probe.reason << "): the CUDA backend needs a GPU";
    }
    cuda::set_device(0);
    stream_ = std::make_unique<cuda::CudaStream>(0);
    allocator_ = std::make_unique<cuda::CudaCachingAllocator>(0, stream_->native());
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    seed_trace_ = std::make_unique<::testing::ScopedTrace>(__FILE__, __LINE__, "random seed " + std::to_string(seed_));
  }
  void TearDown() override {
    if (stream_) stream_->synchronize();
    allocator_.reset();  // before the stream it is ordered on
    stream_.reset();
    seed_trace_.reset();
  }

  cudaStream_t stream() const { return stream_->native(); }
  const Stream& engine_stream() const { return stream_->stream(); }
  cuda::CudaCachingAllocator& allocator() { return *allocator_; }
  void sync() { stream_->synchronize(); }

  std::vector<float> random_floats(std::size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng_);
    return v;
  }
  std::vector<int32_t> random_ints(std::size_t n, int32_t lo, int32_t hi) {  // inclusive
    std::uniform_int_distribution<int32_t> dist(lo, hi);
    std::vector<int32_t> v(n);
    for (int32_t& x : v) x = dist(rng_);
    return v;
  }
  std::mt19937_64& rng() { return rng_; }

  // A device tensor holding `host` (T = float, int32_t or uint16_t bf16 bits).
  template <typename T>
  Tensor upload(const std::vector<T>& host, DType dtype, MemoryCategory category = MemoryCategory::kActivations) {
    Tensor t = Tensor::empty(Shape{static_cast<int64_t>(host.size())}, dtype, category, *allocator_);
    CLEAVE_ASSERT(t.nbytes() == host.size() * sizeof(T), "upload of {} elements as {}", host.size(), dtype_name(dtype));
    if (!host.empty()) {
      CLEAVE_CUDA_CHECK(cudaMemcpyAsync(t.raw_data(), host.data(), t.nbytes(), cudaMemcpyHostToDevice, stream()));
    }
    sync();
    return t;
  }
  Tensor upload_f32(const std::vector<float>& host) { return upload(host, DType::kF32); }

  // A device tensor of n elements with every byte 0xFF (NaN for f32 and bf16).
  Tensor poisoned(int64_t n, DType dtype = DType::kF32, MemoryCategory category = MemoryCategory::kActivations) {
    Tensor t = Tensor::empty(Shape{n}, dtype, category, *allocator_);
    if (t.nbytes() > 0) CLEAVE_CUDA_CHECK(cudaMemsetAsync(t.raw_data(), 0xff, t.nbytes(), stream()));
    return t;
  }

  // Device workspace of `bytes` (at least one 256-byte block, so a zero-size request still has a valid pointer).
  Tensor workspace(std::size_t bytes) {
    return Tensor::empty(Shape{static_cast<int64_t>(std::max<std::size_t>(bytes, 1))}, DType::kU16,
                         MemoryCategory::kWorkspace, *allocator_);
  }

  template <typename T>
  std::vector<T> download(const Tensor& t) {
    std::vector<T> host(t.nbytes() / sizeof(T));
    if (!host.empty()) {
      CLEAVE_CUDA_CHECK(cudaMemcpyAsync(host.data(), t.raw_data(), t.nbytes(), cudaMemcpyDeviceToHost, stream()));
    }
    sync();
    return host;
  }
  std::vector<float> download_f32(const Tensor& t) { return download<float>(t); }
  std::vector<float> download_bf16(const Tensor& t) {
    std::vector<float> out;
    for (std::uint16_t bits : download<std::uint16_t>(t)) out.push_back(bf16_to_float(bits));
    return out;
  }

  unsigned int seed_ = 0;

 private:
  std::unique_ptr<cuda::CudaStream> stream_;
  std::unique_ptr<cuda::CudaCachingAllocator> allocator_;
  std::mt19937_64 rng_;
  std::unique_ptr<::testing::ScopedTrace> seed_trace_;
};

inline std::vector<std::uint16_t> to_bf16_bits(const std::vector<float>& v) {
  std::vector<std::uint16_t> out;
  out.reserve(v.size());
  for (float x : v) out.push_back(float_to_bf16(x));
  return out;
}
inline std::vector<float> round_to_bf16(const std::vector<float>& v) {
  std::vector<float> out;
  out.reserve(v.size());
  for (float x : v) out.push_back(bf16_to_float(float_to_bf16(x)));
  return out;
}

// |got - want| <= rtol * (|want| + max|want|) element by element: relative for large elements, and absolute at
// rtol times the tensor's scale for elements near zero (where a different summation order legitimately moves
// the result by more than rtol * |want|). NaN or a size mismatch is wrong. The reference must not be all zero.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rtol,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0.0;
  for (float w : want) scale = std::max(scale, std::fabs(static_cast<double>(w)));
  if (!want.empty()) {
    EXPECT_GT(scale, 0.0) << what << ": the reference is all zero, the check could not fail";
  }
  int64_t wrong = 0;
  std::string first;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got[i];
    const double w = want[i];
    const double tol = rtol * (std::fabs(w) + scale);
    if (!(std::fabs(g - w) <= tol)) {
      if (wrong < 5)
        first += " [" + std::to_string(i) + "] got " + std::to_string(g) + " want " + std::to_string(w) + ";";
      ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0) << what << ": " << wrong << " of " << got.size() << " elements off by more than rtol " << rtol
                      << " (scale " << scale << "):" << first;
}

inline void expect_bitwise_equal(const std::vector<float>& got, const std::vector<float>& want,
                                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t wrong = 0;
  std::string first;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      if (wrong < 5)
        first +=
            " [" + std::to_string(i) + "] got " + std::to_string(got[i]) + " want " + std::to_string(want[i]) + ";";
      ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0) << what << ": " << wrong << " of " << got.size() << " elements differ bitwise:" << first;
}

}  // namespace cleave::testing

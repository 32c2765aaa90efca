// GradientBucketer on device buffers (label gpu, binary gpu_comm_test; compiled, not run on a GPU): the bucketer
// on cuda (buffers from a caching allocator, every op on a non-blocking stream, collectives over NCCL) against
// the same bucketer on the CPU (host buffers, MPI), both in deterministic mode (fixed rank order on both, so the
// reduced values are equal bit for bit: the NCCL deterministic kernel matches the host ordered reduction, and
// the seam's casts and scaling are the CPU's). Every reduction mode (all-reduce, ZeRO-1 reduce-scatter, ZeRO-2
// owned shards) with and without a bf16 wire, two steps each (the second reuses, or for ZeRO-2 re-allocates,
// the buffers), gradients of several sizes in several buckets. Fresh non-zero values per rank, step and
// element; an all-zero result fails. Runs on one rank (ctest, a world of 1) and on n ranks with n devices
// (gpu_comm_test_np2).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/comm/gradient_bucketer.hpp"
#include "engine/comm/mpi/mpi_communicator.hpp"
#include "engine/comm/nccl/nccl_communicator.hpp"
#include "engine/cuda/caching_allocator.hpp"
#include "engine/cuda/device.hpp"
#include "engine/cuda/stream.hpp"
#include "tests/gpu/comm/gpu_comm_env.hpp"
#include "tests/mpi/mpi_test_env.hpp"

namespace cleave::testing::bucketer_gpu_test {
namespace {

using comm::BucketReduction;
using comm::GradientBucketer;

std::vector<comm::GradientSpec> specs() {
  return {{"head.weight", {37, 5}, DType::kF32}, {"head.bias", {1}, DType::kF32},
          {"blocks.1.fc", {1021}, DType::kF32},  {"blocks.0.big", {3001, 7}, DType::kF32},
          {"embed.tok", {401, 3}, DType::kF32}};
}
constexpr double kBucketMib = 16.0 / 1024;  // several buckets of <= 16 KiB, one gradient larger than that

// Rank r's value for element i of gradient g in step s: non-zero, varied in sign and scale.
float grad_value(int rank, int g, std::int64_t i, int step) {
  const std::uint64_t z = (static_cast<std::uint64_t>(rank) * 7919u + static_cast<std::uint64_t>(g) * 104729u +
                           static_cast<std::uint64_t>(i) * 2654435761u + static_cast<std::uint64_t>(step) * 97u) %
                          2000003u;
  const float unit = static_cast<float>(z) / 1000001.5f - 1.0f;
  return (unit == 0.0f ? 0.25f : unit) * (1.0f + static_cast<float>(i % 7));
}

class GpuBucketer : public ::testing::TestWithParam<std::tuple<BucketReduction, bool>> {
 protected:
  void SetUp() override {
    int devices = 0;
    if (const std::string why = no_cuda_device(devices, "the device bucketer needs a GPU"); !why.empty()) GTEST_SKIP() << why;
    comm::MpiOptions mpi_options;
    mpi_options.timeout_s = kTestTimeoutS;
    mpi_options.deterministic = true;
    mpi_ = std::make_unique<comm::MpiCommunicator>(MPI_COMM_WORLD, mpi_options, "world");
    if (devices < mpi_->size()) GTEST_SKIP() << mpi_->size() << " ranks but " << devices << " CUDA device(s)";
    comm::NcclOptions options;
    options.timeout_s = kTestTimeoutS;
    options.deterministic = true;
    options.device = -1;
    nccl_ = std::make_unique<comm::NcclCommunicator>(*mpi_, options);
    cuda::set_device(nccl_->device());  // the rank's device is current before its stream is made (as RankSetup does)
    stream_ = std::make_unique<cuda::CudaStream>(nccl_->device());
    allocator_ = std::make_unique<cuda::CudaCachingAllocator>(nccl_->device(), stream_->native());
  }
  void TearDown() override {
    if (stream_) stream_->synchronize();
    nccl_.reset();
    allocator_.reset();
    stream_.reset();
    mpi_.reset();
  }

  std::unique_ptr<comm::MpiCommunicator> mpi_;
  std::unique_ptr<comm::NcclCommunicator> nccl_;
  std::unique_ptr<cuda::CudaStream> stream_;
  std::unique_ptr<cuda::CudaCachingAllocator> allocator_;
};

TEST_P(GpuBucketer, DeviceBucketsEqualHostBucketsBitForBit) {
  const auto [reduction, bf16_wire] = GetParam();
  comm::BucketerOptions options;
  options.bucket_mib = kBucketMib;
  options.scale = 1.0f / static_cast<float>(mpi_->size() + 2);  // not a power of two: the scaling rounds
  options.reduction = reduction;
  if (bf16_wire) options.wire_dtype = DType::kBF16;
  GradientBucketer host(specs(), *mpi_, options, cpu_allocator());
  GradientBucketer device(specs(), *nccl_, options, *allocator_, stream_->stream());
  ASSERT_EQ(device.num_buckets(), host.num_buckets());
  ASSERT_GT(host.num_buckets(), 2);
  const int rank = mpi_->rank();
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    host.zero_grads();
    device.zero_grads();
    stream_->synchronize();  // the zeroing (on the stream) before the uploads (cudaMemcpy, legacy stream)
    for (int g = 0; g < host.num_grads(); ++g) {
      const Tensor h = host.grad(g);
      std::vector<float> values(static_cast<std::size_t>(h.numel()));
      for (std::int64_t i = 0; i < h.numel(); ++i) values[static_cast<std::size_t>(i)] = grad_value(rank, g, i, step);
      std::memcpy(h.raw_data(), values.data(), h.nbytes());
      upload(device.grad(g), values);
    }
    CLEAVE_CUDA_CHECK(cudaDeviceSynchronize());  // the uploads before the bucketer's work on its stream
    for (int g = host.num_grads() - 1; g >= 0; --g) {  // any order: launches follow bucket order
      host.mark_ready(g);
      device.mark_ready(g);
    }
    host.finish();
    device.finish();
    stream_->synchronize();  // the scaling (on the stream) before the downloads
    std::int64_t compared = 0, differing = 0, nonzero = 0;
    for (int b = 0; b < host.num_buckets(); ++b) {
      const Tensor h = host.sharded() ? host.shard(b) : host.bucket_buffer(b);
      const Tensor d = device.sharded() ? device.shard(b) : device.bucket_buffer(b);
      ASSERT_TRUE(d.defined() && d.device().is_cuda()) << "bucket " << b;
      ASSERT_EQ(d.numel(), h.numel()) << "bucket " << b;
      const std::vector<float> got = download<float>(d);
      const auto* want = static_cast<const float*>(h.raw_data());
      for (std::int64_t i = 0; i < h.numel(); ++i) {
        ++compared;
        nonzero += want[i] != 0.0f;
        differing += std::memcmp(&got[static_cast<std::size_t>(i)], &want[i], sizeof(float)) != 0;
      }
    }
    EXPECT_EQ(differing, 0) << "of " << compared << " reduced elements";
    EXPECT_GT(nonzero, compared / 2) << "the reference is mostly zero: the test could not fail";
    if (host.owns_shards()) {
      host.release_shards();
      device.release_shards();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modes, GpuBucketer,
    ::testing::Combine(::testing::Values(BucketReduction::kAllReduce, BucketReduction::kReduceScatter,
                                         BucketReduction::kReduceScatterOwned),
                       ::testing::Bool()),
    [](const ::testing::TestParamInfo<GpuBucketer::ParamType>& info) {
      const BucketReduction r = std::get<0>(info.param);
      return std::string(r == BucketReduction::kAllReduce      ? "AllReduce"
                         : r == BucketReduction::kReduceScatter ? "Zero1"
                                                                : "Zero2") +
             (std::get<1>(info.param) ? "Bf16Wire" : "F32Wire");
    });

}  // namespace
}  // namespace cleave::testing::bucketer_gpu_test

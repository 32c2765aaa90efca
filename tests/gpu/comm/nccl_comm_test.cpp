// NCCL backend on real GPUs (label `gpu`; every test skips with the reason when no CUDA device is visible).
// Run directly (world of 1) by ctest for each test, and under mpiexec -n 2 when two devices are visible.
// Checks: collectives of every NCCL dtype against closed forms (#wrong = 0), in-place forms, self and ring
// batch_p2p, the count exchange and all_to_all_v with blocks of 0 rows (also posted on a CUDA stream, completing on
// the device), split, ordering after work on a user stream, the deterministic kernel bit-for-bit against the host
// ordered reduction, the deterministic mode's staging scratch (grown in the warm-up only; stream-ordered on a real
// stream and returned to CUDA's pool), and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "engine/comm/host_reduce.hpp"
#include "engine/cuda/caching_allocator.hpp"
#include "engine/cuda/device.hpp"
#include "engine/comm/nccl/nccl_communicator.hpp"
#include "engine/comm/nccl/ordered_reduce.hpp"
#include "engine/comm/nccl/stream_scratch.hpp"
#include "tests/gpu/comm/gpu_comm_env.hpp"
#include "tests/mpi/mpi_test_env.hpp"
#include "tests/mpi/tensor_values.hpp"

namespace cleave::testing::nccl_comm_test {
namespace {

using comm::P2POp;
using comm::ReduceOp;

constexpr DType kNcclReduceTypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64};
const std::int64_t kSizes[] = {1, 2, 13, 1021, 100003};

class Nccl : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    if (const std::string why = no_cuda_device(devices, "the NCCL backend needs a GPU"); !why.empty()) GTEST_SKIP() << why;
    comm::MpiOptions mpi_options;
    mpi_options.timeout_s = kTestTimeoutS;
    mpi_ = std::make_unique<comm::MpiCommunicator>(MPI_COMM_WORLD, mpi_options, "world");
    if (devices < mpi_->size()) {
      GTEST_SKIP() << mpi_->size() << " ranks but " << devices << " CUDA device(s) on this node";
    }
    comm::NcclOptions options;
    options.timeout_s = kTestTimeoutS;
    options.device = -1;  // from the launcher's local rank, as in production
    nccl_ = std::make_unique<comm::NcclCommunicator>(*mpi_, options);
    // The rank's device current (as RankSetup makes it): the tests' own streams, launches and legacy-stream copies
    // go to it. Without this, rank 1 of gpu_comm_test_np2 (cuda:1) made WaitsForTheCallersStream's stream on
    // cuda:0, where recording the communicator's cuda:1 event on it fails, and ran the ordered-reduce kernel on
    // cuda:0 over cuda:1's memory.
    cuda::set_device(nccl_->device());
    comm::NcclOptions det_options = options;
    det_options.deterministic = true;
    det_ = std::make_unique<comm::NcclCommunicator>(*mpi_, det_options);
    allocator_ = std::make_unique<cuda::CudaCachingAllocator>(nccl_->device());
  }
  void TearDown() override {
    det_.reset();
    nccl_.reset();
    allocator_.reset();
    mpi_.reset();
  }

  Tensor device(std::int64_t count, DType dtype) {
    return Tensor::empty({count}, dtype, MemoryCategory::kCommunication, *allocator_);
  }
  Tensor host(std::int64_t count, DType dtype) {
    return Tensor::empty({count}, dtype, MemoryCategory::kActivations, cpu_allocator());
  }
  static void to_device(const Tensor& dev, const Tensor& h) {
    CLEAVE_CUDA_CHECK(cudaMemcpy(dev.raw_data(), h.raw_data(), h.nbytes(), cudaMemcpyHostToDevice));
  }
  static void to_host(const Tensor& h, const Tensor& dev) {
    CLEAVE_CUDA_CHECK(cudaMemcpy(h.raw_data(), dev.raw_data(), h.nbytes(), cudaMemcpyDeviceToHost));
  }
  int n() const { return nccl_->size(); }
  int r() const { return nccl_->rank(); }

  std::unique_ptr<comm::MpiCommunicator> mpi_;
  std::unique_ptr<comm::NcclCommunicator> nccl_;
  std::unique_ptr<comm::NcclCommunicator> det_;
  std::unique_ptr<cuda::CudaCachingAllocator> allocator_;
};

TEST_F(Nccl, AllReduceEveryDtypeSumAndMaxBothModes) {
  for (auto* comm : {nccl_.get(), det_.get()}) {
    for (DType dtype : kNcclReduceTypes) {
      for (std::int64_t count : kSizes) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
          Tensor h = host(count, dtype);
          for (std::int64_t i = 0; i < count; ++i) set_value(h, i, small_value(r(), i, 1));
          Tensor d = device(count, dtype);
          to_device(d, h);
          comm->all_reduce(d, op)->wait();
          to_host(h, d);
          std::int64_t wrong = 0;
          for (std::int64_t i = 0; i < count; ++i) {
            double expected = op == ReduceOp::kSum ? 0 : small_value(0, i, 1);
            for (int q = 0; q < n(); ++q) {
              expected = op == ReduceOp::kSum ? expected + small_value(q, i, 1)
                                              : std::max<double>(expected, small_value(q, i, 1));
            }
            wrong += get_value(h, i) != expected;
          }
          EXPECT_EQ(wrong, 0) << dtype_name(dtype) << " x" << count << " " << comm::reduce_op_name(op)
                              << (comm == det_.get() ? " deterministic" : "");
        }
      }
    }
  }
}

TEST_F(Nccl, ReduceScatterAllGatherBroadcastInAndOutOfPlace) {
  for (auto* comm : {nccl_.get(), det_.get()}) {
    for (DType dtype : kNcclReduceTypes) {
      const std::int64_t count = 1031;
      for (bool in_place : {false, true}) {
        Tensor hin = host(count * n(), dtype);
        for (std::int64_t i = 0; i < count * n(); ++i) set_value(hin, i, small_value(r(), i, 2));
        Tensor din = device(count * n(), dtype);
        to_device(din, hin);
        Tensor dout = in_place ? din.slice(r() * count, (r() + 1) * count) : device(count, dtype);
        comm->reduce_scatter(din, dout)->wait();
        Tensor hout = host(count, dtype);
        to_host(hout, dout);
        std::int64_t wrong = 0;
        for (std::int64_t i = 0; i < count; ++i) {
          double expected = 0;
          for (int q = 0; q < n(); ++q) expected += small_value(q, r() * count + i, 2);
          wrong += get_value(hout, i) != expected;
        }
        EXPECT_EQ(wrong, 0) << "reduce_scatter " << dtype_name(dtype) << (in_place ? " in place" : "");

        Tensor gathered = device(count * n(), dtype);
        Tensor mine = in_place ? gathered.slice(r() * count, (r() + 1) * count) : device(count, dtype);
        Tensor hmine = host(count, dtype);
        for (std::int64_t i = 0; i < count; ++i) set_value(hmine, i, small_value(r(), i, 3));
        to_device(mine, hmine);
        comm->all_gather(mine, gathered)->wait();
        Tensor hg = host(count * n(), dtype);
        to_host(hg, gathered);
        wrong = 0;
        for (int q = 0; q < n(); ++q) {
          for (std::int64_t i = 0; i < count; ++i) wrong += get_value(hg, q * count + i) != small_value(q, i, 3);
        }
        EXPECT_EQ(wrong, 0) << "all_gather " << dtype_name(dtype) << (in_place ? " in place" : "");
      }
    }
  }
  for (DType dtype : kAllDTypes) {  // broadcast moves bytes: u16 too
    const int root = n() - 1;
    Tensor h = host(777, dtype);
    for (std::int64_t i = 0; i < 777; ++i) set_value(h, i, small_value(r(), i, 4));
    Tensor d = device(777, dtype);
    to_device(d, h);
    nccl_->broadcast(d, root)->wait();
    to_host(h, d);
    std::int64_t wrong = 0;
    for (std::int64_t i = 0; i < 777; ++i) wrong += get_value(h, i) != small_value(root, i, 4);
    EXPECT_EQ(wrong, 0) << "broadcast " << dtype_name(dtype);
  }
  nccl_->barrier()->wait();
}

TEST_F(Nccl, SelfAndRingBatchP2PInOrder) {
  const int right = (r() + 1) % n();
  const int left = (r() + n() - 1) % n();
  for (DType dtype : kAllDTypes) {
    Tensor h1 = host(4099, dtype);
    Tensor h2 = host(33, dtype);
    for (std::int64_t i = 0; i < 4099; ++i) set_value(h1, i, small_value(r(), i, 5));
    for (std::int64_t i = 0; i < 33; ++i) set_value(h2, i, small_value(r(), i, 6));
    Tensor s1 = device(4099, dtype), s2 = device(33, dtype), s3 = device(33, dtype);
    Tensor g1 = device(4099, dtype), g2 = device(33, dtype), g3 = device(33, dtype);
    to_device(s1, h1);
    to_device(s2, h2);
    to_device(s3, h2);
    // Ring to the right, plus a message to self; two messages to the same peer match in posting order.
    nccl_->batch_p2p({P2POp::send(s1, right), P2POp::send(s2, r()), P2POp::recv(g1, left), P2POp::recv(g2, r()),
                      P2POp::send(s3, right), P2POp::recv(g3, left)})
        ->wait();
    Tensor b1 = host(4099, dtype), b2 = host(33, dtype), b3 = host(33, dtype);
    to_host(b1, g1);
    to_host(b2, g2);
    to_host(b3, g3);
    std::int64_t wrong = 0;
    for (std::int64_t i = 0; i < 4099; ++i) wrong += get_value(b1, i) != small_value(left, i, 5);
    for (std::int64_t i = 0; i < 33; ++i) wrong += get_value(b2, i) != small_value(r(), i, 6);
    for (std::int64_t i = 0; i < 33; ++i) wrong += get_value(b3, i) != small_value(left, i, 6);
    EXPECT_EQ(wrong, 0) << dtype_name(dtype);
  }
}

// Expert parallelism's exchange (layers/moe/expert_dispatch.cpp): the counts first (exchange_counts, i64 on the
// device, one row per peer, this rank's own included), then all_to_all_v with those counts. Rank r sends
// rows_to(r, q) rows to rank q: 1 row to itself on one rank (the self send/receive pair), and from 2 ranks on a block
// of 0 rows both ways. Rows are 5 elements (bf16: 10-byte rows, so blocks start off 4-byte boundaries); every value
// names its sender, its destination, its row and column. Then an exchange where this rank sends and receives
// nothing at all returns at once.
TEST_F(Nccl, AllToAllVWithZeroCountsAfterExchangingThem) {
  const std::int64_t width = 5;
  const auto rows_to = [](int from, int to) { return static_cast<std::int64_t>((from + 2 * to + 1) % 3); };
  const auto value = [&](int from, int to, std::int64_t row, std::int64_t col) {
    return static_cast<double>(small_value(from, (to * 3 + row) * width + col, to));
  };
  const auto make = [&](std::int64_t rows, DType dtype, bool on_device) {
    return Tensor::empty({rows, width}, dtype, MemoryCategory::kCommunication,
                         on_device ? static_cast<Allocator&>(*allocator_) : cpu_allocator());
  };
  Tensor counts_h = Tensor::empty({n(), 1}, DType::kI64, MemoryCategory::kCommunication, cpu_allocator());
  for (int q = 0; q < n(); ++q) counts_h.data<std::int64_t>()[q] = rows_to(r(), q);
  Tensor counts = Tensor::empty({n(), 1}, DType::kI64, MemoryCategory::kCommunication, *allocator_);
  Tensor got = Tensor::empty({n(), 1}, DType::kI64, MemoryCategory::kCommunication, *allocator_);
  to_device(counts, counts_h);
  comm::exchange_counts(*nccl_, counts, got)->wait();
  const std::vector<std::int64_t> recv_rows = download<std::int64_t>(got);
  std::vector<std::int64_t> send_rows;
  std::int64_t sent = 0, received = 0;
  for (int q = 0; q < n(); ++q) {
    EXPECT_EQ(recv_rows[static_cast<std::size_t>(q)], rows_to(q, r())) << "count from rank " << q;
    send_rows.push_back(rows_to(r(), q));
    sent += send_rows.back();
    received += recv_rows[static_cast<std::size_t>(q)];
  }
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    Tensor send_h = make(sent, dtype, false), want = make(received, dtype, false);
    for (std::int64_t q = 0, row = 0; q < n(); ++q) {
      for (std::int64_t j = 0; j < rows_to(r(), static_cast<int>(q)); ++j, ++row) {
        for (std::int64_t c = 0; c < width; ++c) {
          set_value(send_h, row * width + c, value(r(), static_cast<int>(q), j, c));
        }
      }
    }
    for (std::int64_t p = 0, row = 0; p < n(); ++p) {
      for (std::int64_t j = 0; j < rows_to(static_cast<int>(p), r()); ++j, ++row) {
        for (std::int64_t c = 0; c < width; ++c) {
          set_value(want, row * width + c, value(static_cast<int>(p), r(), j, c));
        }
      }
    }
    Tensor send = make(sent, dtype, true), recv = make(received, dtype, true);
    if (sent > 0) to_device(send, send_h);
    if (received > 0) CLEAVE_CUDA_CHECK(cudaMemset(recv.raw_data(), 0xFF, recv.nbytes()));
    nccl_->all_to_all_v(send, send_rows, recv, recv_rows)->wait();
    Tensor back = make(received, dtype, false);
    if (received > 0) to_host(back, recv);
    std::int64_t wrong = 0;
    for (std::int64_t i = 0; i < received * width; ++i) wrong += get_value(back, i) != get_value(want, i);
    EXPECT_EQ(wrong, 0) << dtype_name(dtype) << ": " << received << " rows received";
  }
  const std::vector<std::int64_t> none(static_cast<std::size_t>(n()), 0);
  nccl_->all_to_all_v(make(0, DType::kF32, true), none, make(0, DType::kF32, true), none)->wait();
  nccl_->barrier()->wait();
}

// The expert-parallel exchange as the MoE layer posts it on a GPU: counts and rows written on the caller's
// non-blocking stream and still queued there when the ops are posted, each Work completed on the device (wait()
// makes the stream wait for the op and returns), the counts and rows read back on that stream. Checks the ready
// event orders the p2p group after the stream's writes and the done event orders the read-backs after it; at one
// rank the self pair, at two also blocks of 0 rows (rows_to is 0 for some pairs).
TEST_F(Nccl, AllToAllVOnTheCallersStreamCompletesOnTheDevice) {
  cudaStream_t user = nullptr;
  CLEAVE_CUDA_CHECK(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking));
  const Stream stream(Device::cuda(nccl_->device()), user);
  const std::int64_t width = 7;
  const auto rows_to = [](int from, int to) { return static_cast<std::int64_t>((2 * from + to + 1) % 3); };
  const auto value = [&](int from, int to, std::int64_t row, std::int64_t col) {
    return static_cast<float>(small_value(from, (to * 3 + row) * width + col, to + 1));
  };
  std::vector<std::int64_t> counts_h;
  for (int q = 0; q < n(); ++q) counts_h.push_back(rows_to(r(), q));
  Tensor counts = Tensor::empty({n(), 1}, DType::kI64, MemoryCategory::kCommunication, *allocator_);
  Tensor got = Tensor::empty({n(), 1}, DType::kI64, MemoryCategory::kCommunication, *allocator_);
  CLEAVE_CUDA_CHECK(cudaMemsetAsync(counts.raw_data(), 0xFF, counts.nbytes(), user));  // -1 unless the copy is seen
  CLEAVE_CUDA_CHECK(cudaMemcpyAsync(counts.raw_data(), counts_h.data(), counts.nbytes(), cudaMemcpyHostToDevice, user));
  comm::exchange_counts(*nccl_, counts, got, stream)->wait();
  std::vector<std::int64_t> recv_rows(static_cast<std::size_t>(n()), -7);
  CLEAVE_CUDA_CHECK(cudaMemcpyAsync(recv_rows.data(), got.raw_data(), got.nbytes(), cudaMemcpyDeviceToHost, user));
  CLEAVE_CUDA_CHECK(cudaStreamSynchronize(user));
  std::int64_t sent = 0, received = 0;
  for (int q = 0; q < n(); ++q) {
    ASSERT_EQ(recv_rows[static_cast<std::size_t>(q)], rows_to(q, r())) << "count from rank " << q;
    sent += rows_to(r(), q);
    received += rows_to(q, r());
  }
  std::vector<float> send_h, want;
  for (int q = 0; q < n(); ++q) {
    for (std::int64_t j = 0; j < rows_to(r(), q); ++j) {
      for (std::int64_t c = 0; c < width; ++c) send_h.push_back(value(r(), q, j, c));
    }
  }
  for (int p = 0; p < n(); ++p) {
    for (std::int64_t j = 0; j < rows_to(p, r()); ++j) {
      for (std::int64_t c = 0; c < width; ++c) want.push_back(value(p, r(), j, c));
    }
  }
  Tensor send = Tensor::empty({sent, width}, DType::kF32, MemoryCategory::kCommunication, *allocator_);
  Tensor recv = Tensor::empty({received, width}, DType::kF32, MemoryCategory::kCommunication, *allocator_);
  if (sent > 0) {
    CLEAVE_CUDA_CHECK(cudaMemsetAsync(send.raw_data(), 0xFF, send.nbytes(), user));
    CLEAVE_CUDA_CHECK(cudaMemcpyAsync(send.raw_data(), send_h.data(), send.nbytes(), cudaMemcpyHostToDevice, user));
  }
  if (received > 0) CLEAVE_CUDA_CHECK(cudaMemsetAsync(recv.raw_data(), 0xFF, recv.nbytes(), user));
  const std::vector<std::int64_t> send_rows(counts_h);
  nccl_->all_to_all_v(send, send_rows, recv, recv_rows, stream)->wait();
  std::vector<float> back(static_cast<std::size_t>(received * width), -1.0f);
  if (received > 0) {
    CLEAVE_CUDA_CHECK(cudaMemcpyAsync(back.data(), recv.raw_data(), recv.nbytes(), cudaMemcpyDeviceToHost, user));
  }
  CLEAVE_CUDA_CHECK(cudaStreamSynchronize(user));
  std::int64_t wrong = 0;
  for (std::size_t i = 0; i < back.size(); ++i) wrong += back[i] != want[i];
  EXPECT_EQ(wrong, 0) << received << " rows received";
  nccl_->barrier()->wait();
  CLEAVE_CUDA_CHECK(cudaStreamDestroy(user));
}

TEST_F(Nccl, SplitAndLeaveOut) {
  auto self = nccl_->split(r(), 0, "self");
  ASSERT_NE(self, nullptr);
  EXPECT_EQ(self->size(), 1);
  EXPECT_EQ(self->backend(), "nccl");
  Tensor h = host(100, DType::kF32);
  for (std::int64_t i = 0; i < 100; ++i) set_value(h, i, small_value(r(), i));
  Tensor d = device(100, DType::kF32);
  to_device(d, h);
  self->all_reduce(d, ReduceOp::kSum)->wait();
  to_host(h, d);
  std::int64_t wrong = 0;
  for (std::int64_t i = 0; i < 100; ++i) wrong += get_value(h, i) != small_value(r(), i);
  EXPECT_EQ(wrong, 0);
  auto none = nccl_->split(-1, 0);
  EXPECT_EQ(none, nullptr);
}

// The op must see data produced on the caller's stream just before (stream-ordered, no host sync).
TEST_F(Nccl, WaitsForTheCallersStream) {
  cudaStream_t user = nullptr;
  CLEAVE_CUDA_CHECK(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking));
  const std::int64_t count = 1 << 22;
  std::vector<float> ones(static_cast<std::size_t>(count), 1.0f);
  Tensor d = device(count, DType::kF32);
  CLEAVE_CUDA_CHECK(cudaMemsetAsync(d.raw_data(), 0, d.nbytes(), user));
  CLEAVE_CUDA_CHECK(cudaMemcpyAsync(d.raw_data(), ones.data(), d.nbytes(), cudaMemcpyHostToDevice, user));
  auto work = nccl_->all_reduce(d, ReduceOp::kSum, Stream(Device::cuda(nccl_->device()), user));
  while (!work->test()) {
  }
  std::vector<float> back = download<float>(d);
  std::int64_t wrong = 0;
  for (float v : back) wrong += v != static_cast<float>(n());
  EXPECT_EQ(wrong, 0);
  CLEAVE_CUDA_CHECK(cudaStreamDestroy(user));
}

TEST_F(Nccl, OrderedReduceKernelMatchesHostBitForBit) {
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  const int slots = 5;
  const std::int64_t count = 70001;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      Tensor staged = host(slots * count, dtype);
      for (std::int64_t i = 0; i < slots * count; ++i) {
        set_value(staged, i, mantissa(gen) * std::pow(10.0f, static_cast<float>(gen() % 5) - 2.0f));
      }
      Tensor expected = host(count, dtype);
      std::vector<const void*> ptrs;
      for (int s = 0; s < slots; ++s) ptrs.push_back(static_cast<char*>(staged.raw_data()) + s * count * dtype_size(dtype));
      comm::ordered_reduce(dtype, op, ptrs, expected.raw_data(), count);
      Tensor dstaged = device(slots * count, dtype);
      Tensor dout = device(count, dtype);
      to_device(dstaged, staged);
      CLEAVE_CUDA_CHECK(comm::ordered_reduce_on_device(dtype, op == ReduceOp::kMax, dstaged.raw_data(), slots, count,
                                                       dout.raw_data(), count, nullptr));
      CLEAVE_CUDA_CHECK(cudaDeviceSynchronize());
      Tensor got = host(count, dtype);
      to_host(got, dout);
      EXPECT_EQ(std::memcmp(got.raw_data(), expected.raw_data(), got.nbytes()), 0)
          << dtype_name(dtype) << " " << comm::reduce_op_name(op);
    }
  }
}

// The deterministic mode's staging (stream_scratch.hpp): a "step" of reductions (an f32 all_reduce per bucket and a
// bf16 reduce_scatter) repeated; only the first step may grow the communicator's scratch, the results stay exact,
// and a larger bucket grows it once more. A world of 1 rank reduces in place and stages nothing (checked too:
// gpu_comm_test_np2 runs the exchange on two GPUs).
TEST_F(Nccl, DeterministicStagingGrowsOnlyInTheWarmUp) {
  const std::int64_t buckets[] = {100003, 13, 1021, 300007};
  auto step = [&](int seed) {
    std::int64_t wrong = 0;
    for (std::int64_t count : buckets) {
      Tensor h = host(count, DType::kF32);
      for (std::int64_t i = 0; i < count; ++i) set_value(h, i, small_value(r(), i, seed));
      Tensor d = device(count, DType::kF32);
      to_device(d, h);
      det_->all_reduce(d, ReduceOp::kSum)->wait();
      to_host(h, d);
      for (std::int64_t i = 0; i < count; ++i) {
        double expected = 0;
        for (int q = 0; q < n(); ++q) expected += small_value(q, i, seed);
        wrong += get_value(h, i) != expected;
      }
    }
    const std::int64_t count = 4099;
    Tensor hin = host(count * n(), DType::kBF16);
    for (std::int64_t i = 0; i < count * n(); ++i) set_value(hin, i, small_value(r(), i, seed + 1));
    Tensor din = device(count * n(), DType::kBF16);
    to_device(din, hin);
    Tensor dout = device(count, DType::kBF16);
    det_->reduce_scatter(din, dout)->wait();
    Tensor hout = host(count, DType::kBF16);
    to_host(hout, dout);
    for (std::int64_t i = 0; i < count; ++i) {
      double expected = 0;
      for (int q = 0; q < n(); ++q) expected += small_value(q, r() * count + i, seed + 1);
      wrong += get_value(hout, i) != expected;
    }
    return wrong;
  };
  EXPECT_EQ(step(5), 0) << "the warm-up step";
  const comm::NcclStagingStats warm = det_->staging_stats();
  for (int seed = 6; seed < 9; ++seed) EXPECT_EQ(step(seed), 0) << "step with seed " << seed;
  const comm::NcclStagingStats steady = det_->staging_stats();
  if (n() == 1) {
    EXPECT_EQ(steady.growths, 0) << "a world of 1 rank staged a reduction";
    EXPECT_EQ(steady.capacity_bytes, 0u);
    return;
  }
  EXPECT_GT(warm.growths, 0);
  EXPECT_GE(warm.capacity_bytes, static_cast<std::size_t>(300007 / n() * n() * 4));
  EXPECT_EQ(steady.growths, warm.growths) << "a step after the warm-up allocated staging";
  EXPECT_EQ(steady.capacity_bytes, warm.capacity_bytes);
  const std::int64_t large = 4000037;  // 16 MB of f32: past the warm-up's capacity
  Tensor h = host(large, DType::kF32);
  for (std::int64_t i = 0; i < large; ++i) set_value(h, i, small_value(r(), i, 9));
  Tensor d = device(large, DType::kF32);
  to_device(d, h);
  det_->all_reduce(d, ReduceOp::kSum)->wait();
  to_host(h, d);
  std::int64_t wrong = 0;
  for (std::int64_t i = 0; i < large; ++i) {
    double expected = 0;
    for (int q = 0; q < n(); ++q) expected += small_value(q, i, 9);
    wrong += get_value(h, i) != expected;
  }
  EXPECT_EQ(wrong, 0) << "the reduction that grew the staging";
  EXPECT_EQ(det_->staging_stats().growths, warm.growths + 1);
  EXPECT_GE(det_->staging_stats().capacity_bytes, static_cast<std::size_t>(large / n() * n() * 4));
}

// StreamScratch with CUDA's own calls (cudaMallocAsync / cudaFreeAsync from the device's default pool) on a
// non-blocking stream: a request it holds returns the same memory with its contents, a growth takes whole granules
// and gives the old block back to the pool, release() gives everything back (the pool's used bytes, read after the
// stream is done, return to where they were). One rank is enough.
TEST_F(Nccl, StreamScratchOnTheDeviceGrowsAndReturnsToThePool) {
  using Scratch = comm::detail::StreamScratch;
  cudaStream_t stream = nullptr;
  CLEAVE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaMemPool_t pool = nullptr;
  CLEAVE_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, nccl_->device()));
  auto used = [&] {
    CLEAVE_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::uint64_t bytes = 0;
    CLEAVE_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &bytes));
    return bytes;
  };
  const std::uint64_t before = used();
  {
    Scratch scratch;
    char* a = scratch.reserve(1000, stream);
    CLEAVE_CUDA_CHECK(cudaMemsetAsync(a, 0x5a, 1000, stream));
    char* b = scratch.reserve(Scratch::kGranule, stream);
    EXPECT_EQ(b, a);
    std::vector<unsigned char> back(1000, 0);
    CLEAVE_CUDA_CHECK(cudaMemcpyAsync(back.data(), b, back.size(), cudaMemcpyDeviceToHost, stream));
    EXPECT_EQ(used() - before, Scratch::kGranule);
    std::int64_t wrong = 0;
    for (unsigned char v : back) wrong += v != 0x5a;
    EXPECT_EQ(wrong, 0);
    char* c = scratch.reserve(2 * Scratch::kGranule + 1, stream);
    CLEAVE_CUDA_CHECK(cudaMemsetAsync(c, 0, 3 * Scratch::kGranule, stream));  // every byte it claims to hold
    EXPECT_EQ(used() - before, 3 * Scratch::kGranule) << "the first block did not go back to the pool";
    EXPECT_EQ(scratch.stats().growths, 2);
    scratch.release();
    EXPECT_EQ(used(), before);
    scratch.reserve(64, stream);
  }  // the destructor gives the last block back
  EXPECT_EQ(used(), before);
  CLEAVE_CUDA_CHECK(cudaStreamDestroy(stream));
}

// Host control tensors go over the MPI mirror (finding B3): same ranks, closed-form sums.
TEST_F(Nccl, HostTensorsTravelOverTheMpiMirror) {
  const int n = nccl_->size(), r = nccl_->rank();
  Tensor cpu = host(10, DType::kF32);
  for (int i = 0; i < 10; ++i) cpu.data<float>()[i] = static_cast<float>(i + 1 + r);
  nccl_->all_reduce(cpu, ReduceOp::kSum)->wait();
  for (int i = 0; i < 10; ++i) EXPECT_EQ(cpu.data<float>()[i], static_cast<float>(n * (i + 1) + n * (n - 1) / 2)) << i;
  Tensor root = host(4, DType::kF32);
  for (int i = 0; i < 4; ++i) root.data<float>()[i] = static_cast<float>(7 * i + 3 + r);
  nccl_->broadcast(root, 0)->wait();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(root.data<float>()[i], static_cast<float>(7 * i + 3)) << i;
}

TEST_F(Nccl, ArgumentErrors) {
  Tensor cpu = host(10, DType::kF32);
  EXPECT_THROW(nccl_->all_gather(cpu, device(10 * nccl_->size(), DType::kF32)), Error);  // host and device mixed
  Tensor u16 = device(10, DType::kU16);
  EXPECT_THROW(nccl_->all_reduce(u16, ReduceOp::kSum), Error);
  nccl_->barrier()->wait();
}

}  // namespace
}  // namespace cleave::testing::nccl_comm_test

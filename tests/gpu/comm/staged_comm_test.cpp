// StagedCommunicator (engine/comm/cuda): GPU tensors over the MPI backend through pinned host memory (label
// `gpu`). Run directly (a world of 1 rank) by ctest for each test, and under mpiexec -n 2 with both ranks on
// cuda:0: two ranks sharing one GPU is what staging is for, so the 2-rank run needs one device, not two.
//
// Asserts, on fresh random inputs shared by all ranks (seed broadcast from rank 0, printed on failure):
//  - all_reduce sum and max of f32 / bf16 / i32 GPU tensors equal their closed forms (#wrong = 0) at sizes 1, 7,
//    1000003 and 0, in plain and deterministic mode, on a user stream whose pending work produced the input
//    and on the CPU stream (the device's default stream);
//  - deterministic mode: the GPU result is bit-identical to the same op on CPU tensors (the MPI path) and to the
//    library's ordered reduction of every rank's input (values over eight decades, so order shows in the bits);
//  - reduce_scatter and all_gather, out of place and in place (poisoned outputs), broadcast from the last rank
//    into outputs whose stream still has pending writes, batch_p2p rings of GPU sends and receives (mixed with
//    CPU tensors, and receives posted ahead in a batch of their own), splits (names, shared pinned allocator,
//    subgroup results), the expert-parallel all_to_all_v after its device count exchange (blocks of 0 rows, the
//    self pair, sends still pending on the stream);
//  - after a warm-up step, repeated steps make no new pinned system allocation and leave no pinned bytes in use, and
//    create no CUDA event (8 receives posted ahead in flight at once, then all_reduce, reduce_scatter, all_gather
//    and broadcast: the events come from per-device pools and are reused; results right every step), and make no
//    heap allocation and no Work (the Works come from a pool and keep their vectors; heap_counter.hpp counts);
// The `StagedHost` tests need no GPU and run everywhere: CPU tensors pass through to the MPI backend untouched
// (no pinned allocation), and the argument errors (mixed devices, wrong stream device, the MPI backend's
// refusal of GPU tensors) name the op and both devices.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/comm/cuda/staged_communicator.hpp"
#include "engine/comm/host_reduce.hpp"
#include "engine/comm/mpi/mpi_communicator.hpp"
#include "engine/cuda/caching_allocator.hpp"
#include "engine/cuda/copy.hpp"
#include "engine/cuda/device.hpp"
#include "engine/cuda/stream.hpp"
#include "tests/e2e/heap_counter.hpp"
#include "tests/mpi/mpi_test_env.hpp"
#include "tests/mpi/tensor_values.hpp"

namespace cleave::testing::staged_comm_test {
namespace {

using comm::P2POp;
using comm::ReduceOp;
using comm::StagedCommunicator;

std::unique_ptr<StagedCommunicator> make_staged(bool deterministic) {
  comm::MpiOptions options;
  options.timeout_s = kTestTimeoutS;
  options.deterministic = deterministic;
  return std::make_unique<StagedCommunicator>(std::make_unique<comm::MpiCommunicator>(MPI_COMM_WORLD, options, "world"));
}

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int world_size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// A random seed drawn by rank 0 and known to every rank (collective).
std::uint64_t shared_seed() {
  std::random_device device;
  std::uint64_t seed = (static_cast<std::uint64_t>(device()) << 32) ^ device();
  MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  return seed;
}

std::uint64_t mix(std::uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Integer in [-15, 15] for (seed, rank, element, salt), the same on every rank: exact in every dtype, and sums
// over up to 17 ranks stay exact in bf16 (|sum| < 256).
int int_value(std::uint64_t seed, int rank, std::int64_t i, int salt) {
  const std::uint64_t h = mix(seed ^ mix(static_cast<std::uint64_t>(rank) * 1000003ULL + static_cast<std::uint64_t>(salt)) ^
                              mix(static_cast<std::uint64_t>(i)));
  return static_cast<int>(h % 31) - 15;
}

// CPU tensor of `count` int_values of `rank` (shifted to 1..31 for u16, which holds no negative values; u16 is
// only moved, never reduced, here).
Tensor host_values(std::uint64_t seed, std::int64_t count, DType dtype, int rank, int salt) {
  Tensor t = Tensor::empty({count}, dtype, MemoryCategory::kActivations, cpu_allocator());
  const int shift = dtype == DType::kU16 ? 16 : 0;
  for (std::int64_t i = 0; i < count; ++i) set_value(t, i, int_value(seed, rank, i, salt) + shift);
  return t;
}

// Rank q's input for the deterministic checks: random sign and mantissa, decimal exponent in [-4, 4], never
// zero, so summation order changes the bits.
Tensor spread_values(std::uint64_t seed, std::int64_t count, DType dtype, int rank, int salt) {
  std::mt19937_64 gen(mix(seed ^ mix(static_cast<std::uint64_t>(rank) * 7919ULL + static_cast<std::uint64_t>(salt))));
  std::uniform_real_distribution<float> mantissa(0.5f, 1.0f);
  std::uniform_int_distribution<int> exponent(-4, 4);
  std::bernoulli_distribution sign(0.5);
  Tensor t = Tensor::empty({count}, dtype, MemoryCategory::kActivations, cpu_allocator());
  for (std::int64_t i = 0; i < count; ++i) {
    const float x = (sign(gen) ? -1.0f : 1.0f) * mantissa(gen) * std::pow(10.0f, static_cast<float>(exponent(gen)));
    set_value(t, i, x);
  }
  return t;
}

std::int64_t byte_mismatches(const Tensor& a, const Tensor& b) {
  if (a.nbytes() != b.nbytes()) return std::max(a.numel(), b.numel());
  const std::size_t elem = dtype_size(a.dtype());
  std::int64_t wrong = 0;
  const auto* pa = static_cast<const char*>(a.raw_data());
  const auto* pb = static_cast<const char*>(b.raw_data());
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    wrong += std::memcmp(pa + static_cast<std::size_t>(i) * elem, pb + static_cast<std::size_t>(i) * elem, elem) != 0;
  }
  return wrong;
}

// The message of the cleave::Error `f` throws ("" when it throws none).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ---- GPU tests ------------------------------------------------------------------------------------------------

class Staged : public ::testing::Test {
 protected:
  void SetUp() override {
    const cuda::DeviceProbe probe = cuda::probe_devices();
    if (probe.count == 0) {
      GTEST_SKIP() << "no CUDA device visible (" << probe.reason << "): staging GPU tensors through host memory "
                   << "needs a GPU";
    }
    cuda::set_device(0);  // every rank on cuda:0: ranks sharing one GPU
    stream_ = std::make_unique<cuda::CudaStream>(0);
    allocator_ = std::make_unique<cuda::CudaCachingAllocator>(0, stream_->native());
    plain_ = make_staged(false);
    det_ = make_staged(true);
    seed_ = shared_seed();
    seed_trace_ = std::make_unique<::testing::ScopedTrace>(__FILE__, __LINE__, "shared seed " + std::to_string(seed_));
  }
  void TearDown() override {
    if (stream_) stream_->synchronize();
    det_.reset();
    plain_.reset();
    allocator_.reset();  // before the stream it is ordered on
    stream_.reset();
    seed_trace_.reset();
  }

  int r() const { return plain_->rank(); }
  int n() const { return plain_->size(); }
  const Stream& stream() const { return stream_->stream(); }

  Tensor device(const Shape& shape, DType dtype) {
    return Tensor::empty(shape, dtype, MemoryCategory::kActivations, *allocator_);
  }
  // A device copy of `host`, complete on return.
  Tensor upload(const Tensor& host) {
    Tensor d = device(host.shape(), host.dtype());
    cuda::copy(d, host, stream());
    return d;
  }
  // A device copy of `host` that is still being written by work queued on stream() (poison first, then the
  // values): an op that reads it without ordering after stream() sees NaN/garbage.
  Tensor upload_pending(const Tensor& host) {
    Tensor d = device(host.shape(), host.dtype());
    cuda::fill_bytes_async(d, 0xFF, stream());
    cuda::copy_async(d, host, stream());
    return d;
  }
  Tensor download(const Tensor& d) { return cuda::to_host(d, stream()); }
  void poison(const Tensor& d) {
    cuda::fill_bytes_async(d, 0xFF, stream());
    stream_->synchronize();
  }

  std::unique_ptr<cuda::CudaStream> stream_;
  std::unique_ptr<cuda::CudaCachingAllocator> allocator_;
  std::unique_ptr<StagedCommunicator> plain_;
  std::unique_ptr<StagedCommunicator> det_;
  std::uint64_t seed_ = 0;
  std::unique_ptr<::testing::ScopedTrace> seed_trace_;
};

TEST_F(Staged, AllReduceSumAndMaxOfF32Bf16I32AgainstClosedForms) {
  const std::int64_t sizes[] = {1, 7, 1000003, 0};
  int salt = 0;
  for (StagedCommunicator* comm : {plain_.get(), det_.get()}) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kI32}) {
      for (std::int64_t count : sizes) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
          ++salt;
          const Tensor mine = host_values(seed_, count, dtype, r(), salt);
          // sum: on the test's stream, with the upload still queued there; max: the CPU stream, which means
          // cuda:0's legacy default stream (the upload is complete: the test stream does not sync with it).
          const bool on_stream = op == ReduceOp::kSum;
          Tensor d = on_stream ? upload_pending(mine) : upload(mine);
          comm->all_reduce(d, op, on_stream ? stream() : cpu_stream())->wait();
          const Tensor got = download(d);
          std::int64_t wrong = 0;
          std::int64_t nonzero = 0;
          for (std::int64_t i = 0; i < count; ++i) {
            double expected = op == ReduceOp::kSum ? 0.0 : int_value(seed_, 0, i, salt);
            for (int q = 0; q < n(); ++q) {
              const double v = int_value(seed_, q, i, salt);
              expected = op == ReduceOp::kSum ? expected + v : std::max(expected, v);
            }
            wrong += get_value(got, i) != expected;
            nonzero += expected != 0.0;
          }
          const std::string what = fmt::format("{} x{} {}{}", dtype_name(dtype), count, comm::reduce_op_name(op),
                                               comm == det_.get() ? " deterministic" : "");
          EXPECT_EQ(wrong, 0) << what;
          if (count > 1) {
            EXPECT_GT(nonzero, 0) << what << ": all-zero expectation, the check could not fail";
          }
        }
      }
    }
  }
}

TEST_F(Staged, DeterministicModeIsBitIdenticalToTheCpuPath) {
  int salt = 100;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (std::int64_t count : {std::int64_t{7}, std::int64_t{1000003}}) {
      ++salt;
      std::vector<Tensor> inputs;
      for (int q = 0; q < n(); ++q) inputs.push_back(spread_values(seed_, count, dtype, q, salt));
      // Closed form: the library's rank-ordered reduction of every rank's input, computed here.
      Tensor reference = Tensor::empty({count}, dtype, MemoryCategory::kActivations, cpu_allocator());
      std::vector<const void*> slots;
      for (const Tensor& t : inputs) slots.push_back(t.raw_data());
      comm::ordered_reduce(dtype, ReduceOp::kSum, slots, reference.raw_data(), count);

      Tensor on_gpu = upload_pending(inputs[static_cast<std::size_t>(r())]);
      det_->all_reduce(on_gpu, ReduceOp::kSum, stream())->wait();
      Tensor on_cpu = inputs[static_cast<std::size_t>(r())].clone(MemoryCategory::kActivations);
      det_->all_reduce(on_cpu, ReduceOp::kSum)->wait();  // CPU tensor: the MPI backend, untouched
      const Tensor got = download(on_gpu);
      EXPECT_EQ(byte_mismatches(got, on_cpu), 0) << dtype_name(dtype) << " x" << count << ": GPU vs CPU path";
      EXPECT_EQ(byte_mismatches(got, reference), 0) << dtype_name(dtype) << " x" << count << ": vs ordered reduction";

      // reduce_scatter: block r of the same reduction.
      const std::int64_t block = count;
      std::vector<Tensor> wholes;
      for (int q = 0; q < n(); ++q) {
        Tensor w = Tensor::empty({block * n()}, dtype, MemoryCategory::kActivations, cpu_allocator());
        for (int b = 0; b < n(); ++b) w.slice(b * block, (b + 1) * block).copy_from(spread_values(seed_, block, dtype, q, salt * 31 + b));
        wholes.push_back(w);
      }
      Tensor rs_reference = Tensor::empty({block}, dtype, MemoryCategory::kActivations, cpu_allocator());
      std::vector<const void*> rs_slots;
      for (const Tensor& w : wholes) rs_slots.push_back(w.slice(r() * block, (r() + 1) * block).raw_data());
      comm::ordered_reduce(dtype, ReduceOp::kSum, rs_slots, rs_reference.raw_data(), block);
      Tensor gpu_in = upload_pending(wholes[static_cast<std::size_t>(r())]);
      Tensor gpu_out = device({block}, dtype);
      poison(gpu_out);
      det_->reduce_scatter(gpu_in, gpu_out, ReduceOp::kSum, stream())->wait();
      Tensor cpu_out = Tensor::empty({block}, dtype, MemoryCategory::kActivations, cpu_allocator());
      det_->reduce_scatter(wholes[static_cast<std::size_t>(r())], cpu_out)->wait();
      const Tensor rs_got = download(gpu_out);
      EXPECT_EQ(byte_mismatches(rs_got, cpu_out), 0) << "reduce_scatter " << dtype_name(dtype) << ": GPU vs CPU path";
      EXPECT_EQ(byte_mismatches(rs_got, rs_reference), 0) << "reduce_scatter " << dtype_name(dtype);
    }
  }
}

TEST_F(Staged, ReduceScatterAndAllGatherOutOfPlaceAndInPlace) {
  const std::int64_t count = 1031;
  int salt = 200;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kI32}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      for (bool in_place : {false, true}) {
        ++salt;
        const Tensor mine = host_values(seed_, count * n(), dtype, r(), salt);
        // In place on a 2-D input [n, count]: the output is row r, shape [1, count].
        Tensor input = upload(in_place ? mine.view({n(), count}) : mine);
        Tensor output = in_place ? input.slice(r(), r() + 1) : device({count}, dtype);
        if (!in_place) poison(output);
        comm::WorkPtr work = plain_->reduce_scatter(input, output, op, stream());
        work->wait();
        const Tensor got = download(output);
        std::int64_t wrong = 0;
        for (std::int64_t i = 0; i < count; ++i) {
          double expected = op == ReduceOp::kSum ? 0.0 : int_value(seed_, 0, r() * count + i, salt);
          for (int q = 0; q < n(); ++q) {
            const double v = int_value(seed_, q, r() * count + i, salt);
            expected = op == ReduceOp::kSum ? expected + v : std::max(expected, v);
          }
          wrong += get_value(got, i) != expected;
        }
        EXPECT_EQ(wrong, 0) << "reduce_scatter " << dtype_name(dtype) << " " << comm::reduce_op_name(op)
                            << (in_place ? " in place" : "");
      }
    }
    for (bool in_place : {false, true}) {
      ++salt;
      const Tensor mine = host_values(seed_, count, dtype, r(), salt);
      Tensor gathered = device({n(), count}, dtype);
      poison(gathered);
      Tensor input;
      if (in_place) {
        input = gathered.slice(r(), r() + 1);
        cuda::copy(input, mine, stream());
      } else {
        input = upload(mine);
      }
      // Completed by polling test(), the non-blocking path.
      comm::WorkPtr work = plain_->all_gather(input, gathered, stream());
      while (!work->test()) {
      }
      const Tensor got = download(gathered);
      std::int64_t wrong = 0;
      for (int q = 0; q < n(); ++q) {
        for (std::int64_t i = 0; i < count; ++i) wrong += get_value(got, q * count + i) != int_value(seed_, q, i, salt);
      }
      EXPECT_EQ(wrong, 0) << "all_gather " << dtype_name(dtype) << (in_place ? " in place" : "");
    }
  }
}

TEST_F(Staged, BroadcastFromTheLastRankEveryDtype) {
  const int root = n() - 1;  // a non-zero root whenever there is more than one rank
  int salt = 300;
  for (DType dtype : kAllDTypes) {
    for (std::int64_t count : {std::int64_t{777}, std::int64_t{1000003}}) {
      ++salt;
      const Tensor expected = host_values(seed_, count, dtype, root, salt);
      // Root: the input is still being written on stream(). Others: stream() still has writes queued into the
      // output (poison, then this rank's own values), which must land before the broadcast result does.
      Tensor d = upload_pending(r() == root ? expected : host_values(seed_, count, dtype, r(), salt + 1000));
      plain_->broadcast(d, root, stream())->wait();
      EXPECT_EQ(byte_mismatches(download(d), expected), 0) << "broadcast " << dtype_name(dtype) << " x" << count;
    }
  }
}

TEST_F(Staged, BatchP2PRingWithGpuSendsAndReceives) {
  const int right = (r() + 1) % n();
  const int left = (r() + n() - 1) % n();
  int salt = 400;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kI64, DType::kU16}) {
    salt += 3;
    const Tensor h1 = host_values(seed_, 4099, dtype, r(), salt);
    const Tensor h2 = host_values(seed_, 33, dtype, r(), salt + 1);
    const Tensor h3 = host_values(seed_, 33, dtype, r(), salt + 2);
    Tensor s1 = upload_pending(h1), s2 = upload_pending(h2), s3 = upload_pending(h3);
    Tensor g1 = device({4099}, dtype), g2 = device({33}, dtype), g3 = device({33}, dtype);
    for (const Tensor& g : {g1, g2, g3}) poison(g);
    // Ring to the right plus a message to self; two messages to one peer with one tag match in posting order.
    plain_->batch_p2p({P2POp::send(s1, right), P2POp::send(s2, r()), P2POp::recv(g1, left), P2POp::recv(g2, r()),
                       P2POp::send(s3, right), P2POp::recv(g3, left)},
                      stream())
        ->wait();
    EXPECT_EQ(byte_mismatches(download(g1), host_values(seed_, 4099, dtype, left, salt)), 0) << dtype_name(dtype);
    EXPECT_EQ(byte_mismatches(download(g2), h2), 0) << dtype_name(dtype) << " self";
    EXPECT_EQ(byte_mismatches(download(g3), host_values(seed_, 33, dtype, left, salt + 2)), 0) << dtype_name(dtype);
  }

  // CPU and GPU tensors in one batch: a CPU send arrives in a GPU receive and the other way round.
  {
    const DType dtype = DType::kF32;
    const Tensor cpu_send = host_values(seed_, 513, dtype, r(), 500);
    Tensor gpu_send = upload(host_values(seed_, 257, dtype, r(), 501));
    Tensor gpu_recv = device({513}, dtype);
    poison(gpu_recv);
    Tensor cpu_recv = Tensor::empty({257}, dtype, MemoryCategory::kActivations, cpu_allocator());
    plain_->batch_p2p({P2POp::send(cpu_send, right, 0), P2POp::send(gpu_send, right, 1), P2POp::recv(gpu_recv, left, 0),
                       P2POp::recv(cpu_recv, left, 1)},
                      stream())
        ->wait();
    EXPECT_EQ(byte_mismatches(download(gpu_recv), host_values(seed_, 513, dtype, left, 500)), 0) << "CPU -> GPU";
    EXPECT_EQ(byte_mismatches(cpu_recv, host_values(seed_, 257, dtype, left, 501)), 0) << "GPU -> CPU";
  }

  // Receives posted ahead in a batch of their own (no host wait at issue), the sends in a later batch.
  {
    const DType dtype = DType::kI32;
    Tensor got = device({1001}, dtype);
    poison(got);
    comm::WorkPtr recv = plain_->batch_p2p({P2POp::recv(got, left, 7)}, stream());
    Tensor mine = upload_pending(host_values(seed_, 1001, dtype, r(), 502));
    comm::WorkPtr send = plain_->batch_p2p({P2POp::send(mine, right, 7)}, stream());
    send->wait();
    recv->wait();
    EXPECT_EQ(byte_mismatches(download(got), host_values(seed_, 1001, dtype, left, 502)), 0) << "posted ahead";
  }
}

// Expert parallelism's exchange on the staged world, the one a single GPU runs at 2 ranks (NCCL refuses two ranks
// on one device): the counts exchanged on the device first (comm::exchange_counts, i64, its send still being
// written on the stream), read back, then all_to_all_v of rows whose send is also still pending, with a block of
// 0 rows between some pairs (rank q sends (q + 2p + 1) % 3 rows to rank p: at 2 ranks rank 0 sends none to rank 1)
// and the self pair; every received row against the sender's values, bit for bit; then all-zero counts.
TEST_F(Staged, AllToAllVWithZeroBlocksAfterTheCountExchange) {
  const std::int64_t width = 3;
  const auto rows_to = [](int from, int to) { return static_cast<std::int64_t>((from + 2 * to + 1) % 3); };
  const auto first_row_to = [&](int from, int to) {
    std::int64_t first = 0;
    for (int p = 0; p < to; ++p) first += rows_to(from, p);
    return first;
  };
  const auto rows_sent_by = [&](int from) { return first_row_to(from, n()); };
  Tensor counts_h = Tensor::empty({n(), 1}, DType::kI64, MemoryCategory::kCommunication, cpu_allocator());
  for (int q = 0; q < n(); ++q) counts_h.data<std::int64_t>()[q] = rows_to(r(), q);
  Tensor got = device({n(), 1}, DType::kI64);
  poison(got);
  comm::exchange_counts(*plain_, upload_pending(counts_h), got, stream())->wait();
  const Tensor got_h = download(got);
  std::vector<std::int64_t> send_rows, recv_rows, want_rows;
  std::int64_t received = 0;
  for (int q = 0; q < n(); ++q) {
    send_rows.push_back(rows_to(r(), q));
    recv_rows.push_back(got_h.data<std::int64_t>()[q]);
    want_rows.push_back(rows_to(q, r()));
    received += want_rows.back();
  }
  ASSERT_EQ(recv_rows, want_rows) << "the exchanged counts (one per source rank)";
  int salt = 700;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    ++salt;
    const auto sent_values = [&](int from) {
      return host_values(seed_, rows_sent_by(from) * width, dtype, from, salt);
    };
    const std::int64_t sent = rows_sent_by(r());
    Tensor send = sent > 0 ? upload_pending(sent_values(r())) : device({0}, dtype);
    Tensor recv = device({received, width}, dtype);
    if (received > 0) poison(recv);
    plain_->all_to_all_v(send.view({sent, width}), send_rows, recv, recv_rows, stream())->wait();
    const Tensor back = download(recv);
    std::int64_t wrong = 0, row = 0;
    for (int p = 0; p < n(); ++p) {
      const Tensor theirs = sent_values(p);
      for (std::int64_t j = 0; j < rows_to(p, r()); ++j, ++row) {
        for (std::int64_t c = 0; c < width; ++c) {
          wrong += get_value(back, row * width + c) != get_value(theirs, (first_row_to(p, r()) + j) * width + c);
        }
      }
    }
    EXPECT_EQ(wrong, 0) << dtype_name(dtype) << ": " << received << " rows received";
  }
  const std::vector<std::int64_t> none(static_cast<std::size_t>(n()), 0);
  plain_->all_to_all_v(device({0, width}, DType::kF32), none, device({0, width}, DType::kF32), none, stream())->wait();
}

TEST_F(Staged, SplitSubgroupsStageThroughTheSharedAllocator) {
  auto parity = plain_->split(r() % 2, r(), "parity");
  ASSERT_NE(parity, nullptr);
  EXPECT_EQ(parity->backend(), "mpi+staging");
  EXPECT_EQ(parity->name(), "world/parity");
  auto* staged = dynamic_cast<StagedCommunicator*>(parity.get());
  ASSERT_NE(staged, nullptr);
  EXPECT_EQ(&staged->pinned_allocator(), &plain_->pinned_allocator());
  std::vector<int> members;
  for (int q = r() % 2; q < n(); q += 2) members.push_back(q);
  EXPECT_EQ(parity->size(), static_cast<int>(members.size()));
  const std::int64_t count = 4097;
  Tensor d = upload(host_values(seed_, count, DType::kF32, r(), 600));
  parity->all_reduce(d, ReduceOp::kSum, stream())->wait();
  const Tensor got = download(d);
  std::int64_t wrong = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    double expected = 0;
    for (int q : members) expected += int_value(seed_, q, i, 600);
    wrong += get_value(got, i) != expected;
  }
  EXPECT_EQ(wrong, 0) << "all_reduce on the parity group";

  // Everyone, ranked in reverse: block k of an all_gather comes from world rank n-1-k.
  auto reversed = plain_->split(0, n() - r(), "reversed");
  ASSERT_NE(reversed, nullptr);
  EXPECT_EQ(reversed->rank(), n() - 1 - r());
  Tensor gathered = device({n() * count}, DType::kF32);
  poison(gathered);
  reversed->all_gather(upload(host_values(seed_, count, DType::kF32, r(), 601)), gathered, stream())->wait();
  const Tensor all = download(gathered);
  wrong = 0;
  for (int k = 0; k < n(); ++k) {
    for (std::int64_t i = 0; i < count; ++i) wrong += get_value(all, k * count + i) != int_value(seed_, n() - 1 - k, i, 601);
  }
  EXPECT_EQ(wrong, 0) << "all_gather on the reversed group";

  // Rank 0 joins none; the others broadcast from their group's last rank.
  auto rest = plain_->split(r() == 0 ? -1 : 0, r(), "rest");
  if (r() == 0) {
    EXPECT_EQ(rest, nullptr);
  } else {
    ASSERT_NE(rest, nullptr);
    const int root = rest->size() - 1;  // world rank n-1
    Tensor b = upload(host_values(seed_, 99, DType::kBF16, r(), 602));
    rest->broadcast(b, root, stream())->wait();
    EXPECT_EQ(byte_mismatches(download(b), host_values(seed_, 99, DType::kBF16, n() - 1, 602)), 0) << "broadcast on rest";
  }
}

TEST_F(Staged, CpuTensorsWithACudaStreamPassThrough) {
  const cuda::PinnedHostAllocator& pinned = plain_->pinned_allocator();
  const std::int64_t before = pinned.stats().requests;
  Tensor t = host_values(seed_, 1001, DType::kF32, r(), 700);
  plain_->all_reduce(t, ReduceOp::kSum, stream())->wait();
  std::int64_t wrong = 0;
  for (std::int64_t i = 0; i < 1001; ++i) {
    double expected = 0;
    for (int q = 0; q < n(); ++q) expected += int_value(seed_, q, i, 700);
    wrong += get_value(t, i) != expected;
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(pinned.stats().requests, before) << "a CPU tensor was staged";
  plain_->barrier(stream())->wait();
}

TEST_F(Staged, NoPinnedSystemAllocationAfterWarmUp) {
  const int right = (r() + 1) % n();
  const int left = (r() + n() - 1) % n();
  std::int64_t wrong = 0;
  auto step = [&](int salt) {
    Tensor a = upload(host_values(seed_, 1000003, DType::kF32, r(), salt));
    plain_->all_reduce(a, ReduceOp::kSum, stream())->wait();
    const Tensor got = download(a);
    for (std::int64_t i = 0; i < 1000003; i += 997) {
      double expected = 0;
      for (int q = 0; q < n(); ++q) expected += int_value(seed_, q, i, salt);
      wrong += get_value(got, i) != expected;
    }
    Tensor in = upload(host_values(seed_, 1031 * n(), DType::kBF16, r(), salt + 1));
    Tensor out = device({1031}, DType::kBF16);
    plain_->reduce_scatter(in, out, ReduceOp::kSum, stream())->wait();
    Tensor gathered = device({1031 * n()}, DType::kBF16);
    plain_->all_gather(out, gathered, stream())->wait();
    Tensor send = upload(host_values(seed_, 4099, DType::kI32, r(), salt + 2));
    Tensor recv = device({4099}, DType::kI32);
    plain_->batch_p2p({P2POp::send(send, right), P2POp::recv(recv, left)}, stream())->wait();
    plain_->broadcast(recv, n() - 1, stream())->wait();
  };
  step(800);
  const MemoryStats warm = plain_->pinned_allocator().stats();
  EXPECT_GT(warm.system_allocations, 0) << "nothing was staged through pinned memory";
  EXPECT_EQ(warm.current_total, 0) << "pinned buffers still held after every Work completed";
  for (int s = 1; s <= 5; ++s) step(800 + 10 * s);
  const MemoryStats after = plain_->pinned_allocator().stats();
  EXPECT_EQ(after.system_allocations, warm.system_allocations) << "cudaHostAlloc after warm-up";
  EXPECT_GT(after.requests, warm.requests);
  EXPECT_EQ(after.current_total, 0);
  EXPECT_EQ(wrong, 0);
}

// Pooled events (engine/cuda/event_pool.hpp, staged_work.hpp): a step of 8 receives posted ahead (each holds its
// ready event until its Work finishes: 8 in flight at once), their sends in one batch, then the collectives, makes
// at least 8 events; three more such steps make none, and every step's results are right (outputs poisoned first).
TEST_F(Staged, StepsAfterTheWarmUpCreateNoEvent) {
  const int right = (r() + 1) % n();
  const int left = (r() + n() - 1) % n();
  constexpr int kInFlight = 8;
  std::int64_t wrong = 0;
  auto step = [&](int salt) {
    std::vector<Tensor> got, mine;
    std::vector<comm::WorkPtr> recvs;
    for (int i = 0; i < kInFlight; ++i) {
      got.push_back(device({1001}, DType::kI32));
      poison(got.back());
      recvs.push_back(plain_->batch_p2p({P2POp::recv(got.back(), left, i)}, stream()));
    }
    std::vector<P2POp> sends;
    for (int i = 0; i < kInFlight; ++i) {
      mine.push_back(upload_pending(host_values(seed_, 1001, DType::kI32, r(), salt + i)));
      sends.push_back(P2POp::send(mine.back(), right, i));
    }
    plain_->batch_p2p(sends, stream())->wait();
    for (comm::WorkPtr& w : recvs) w->wait();
    recvs.clear();
    for (int i = 0; i < kInFlight; ++i) {
      wrong += byte_mismatches(download(got[static_cast<std::size_t>(i)]),
                               host_values(seed_, 1001, DType::kI32, left, salt + i));
    }
    Tensor a = upload_pending(host_values(seed_, 4099, DType::kF32, r(), salt + 20));
    plain_->all_reduce(a, ReduceOp::kSum, stream())->wait();
    const Tensor sum = download(a);
    for (std::int64_t i = 0; i < 4099; ++i) {
      double expected = 0;
      for (int q = 0; q < n(); ++q) expected += int_value(seed_, q, i, salt + 20);
      wrong += get_value(sum, i) != expected;
    }
    Tensor in = upload(host_values(seed_, 1031 * n(), DType::kBF16, r(), salt + 21));
    Tensor out = device({1031}, DType::kBF16);
    poison(out);
    plain_->reduce_scatter(in, out, ReduceOp::kSum, stream())->wait();
    Tensor gathered = device({1031 * n()}, DType::kBF16);
    poison(gathered);
    plain_->all_gather(out, gathered, stream())->wait();
    Tensor b = upload(host_values(seed_, 777, DType::kI32, r(), salt + 22));
    plain_->broadcast(b, n() - 1, stream())->wait();
    wrong += byte_mismatches(download(b), host_values(seed_, 777, DType::kI32, n() - 1, salt + 22));
  };
  step(900);
  const std::size_t warm = plain_->events_made();
  EXPECT_GE(warm, static_cast<std::size_t>(kInFlight)) << "8 receives in flight hold 8 ready events";
  for (int s = 1; s <= 3; ++s) {
    step(900 + 40 * s);
    EXPECT_EQ(plain_->events_made(), warm) << "step " << s << " created a CUDA event";
  }
  EXPECT_EQ(wrong, 0);
}

// Pooled Works (staged_work.hpp): steps of 8 receives posted ahead (8 Works in flight at once), their sends in one
// batch, then all_reduce (max: the same result every step), reduce_scatter, all_gather and broadcast, all on tensors
// made before the steps. After two warm-up steps, three more make no heap allocation (tests/e2e/heap_counter.hpp:
// the engine's whole count is the counter's probe; MPI's own C allocations are not operator new) and no Work, and
// the outputs, poisoned before the counted steps, are right after them.
TEST_F(Staged, StepsAfterTheWarmUpAllocateNothingOnTheHost) {
  const int right = (r() + 1) % n();
  const int left = (r() + n() - 1) % n();
  constexpr int kInFlight = 8;
  std::array<Tensor, kInFlight> got;
  std::array<P2POp, kInFlight> sends;
  for (int i = 0; i < kInFlight; ++i) {
    got[static_cast<std::size_t>(i)] = device({1001}, DType::kI32);
    sends[static_cast<std::size_t>(i)] =
        P2POp::send(upload(host_values(seed_, 1001, DType::kI32, r(), 700 + i)), right, i);
  }
  Tensor a = upload(host_values(seed_, 4099, DType::kF32, r(), 720));
  Tensor in = upload(host_values(seed_, 1031 * n(), DType::kBF16, r(), 721));
  Tensor out = device({1031}, DType::kBF16);
  Tensor gathered = device({1031 * n()}, DType::kBF16);
  Tensor b = upload(host_values(seed_, 777, DType::kI32, r(), 722));
  std::array<comm::WorkPtr, kInFlight> recvs;
  auto step = [&] {
    for (int i = 0; i < kInFlight; ++i) {
      const P2POp recv = P2POp::recv(got[static_cast<std::size_t>(i)], left, i);
      recvs[static_cast<std::size_t>(i)] = plain_->batch_p2p(std::span<const P2POp>(&recv, 1), stream());
    }
    plain_->batch_p2p(std::span<const P2POp>(sends), stream())->wait();
    for (comm::WorkPtr& w : recvs) {
      w->wait();
      w.reset();
    }
    plain_->all_reduce(a, ReduceOp::kMax, stream())->wait();
    plain_->reduce_scatter(in, out, ReduceOp::kSum, stream())->wait();
    plain_->all_gather(out, gathered, stream())->wait();
    plain_->broadcast(b, n() - 1, stream())->wait();
  };
  step();
  step();
  const std::size_t warm = plain_->works_made();
  EXPECT_GE(warm, static_cast<std::size_t>(kInFlight)) << "8 receives in flight hold 8 Works";
  for (const Tensor& t : got) poison(t);
  poison(out);
  poison(gathered);
  heap::start();
  heap::probe();
  for (int s = 0; s < 3; ++s) step();
  const heap::Counts counts = heap::stop();
  std::string sites;
  for (const heap::Site& site : heap::sites()) sites += "\n  " + std::to_string(site.count) + " at " + site.str(4);
  EXPECT_EQ(counts.engine, 1) << "3 steps made " << counts.str() << "; the engine's (the probe's is expected):" << sites;
  EXPECT_EQ(counts.kernels, 0) << counts.str();
  EXPECT_EQ(counts.unsited, 0) << counts.str();
  EXPECT_EQ(plain_->works_made(), warm) << "a counted step made a Work";

  std::int64_t wrong = 0;
  for (int i = 0; i < kInFlight; ++i) {
    wrong += byte_mismatches(download(got[static_cast<std::size_t>(i)]),
                             host_values(seed_, 1001, DType::kI32, left, 700 + i));
  }
  const Tensor max = download(a);
  for (std::int64_t i = 0; i < 4099; ++i) {
    double expected = int_value(seed_, 0, i, 720);
    for (int q = 1; q < n(); ++q) expected = std::max(expected, static_cast<double>(int_value(seed_, q, i, 720)));
    wrong += get_value(max, i) != expected;
  }
  const Tensor mine = download(out);
  const Tensor all = download(gathered);
  for (std::int64_t i = 0; i < 1031; ++i) {
    double expected = 0;
    for (int q = 0; q < n(); ++q) expected += int_value(seed_, q, r() * 1031 + i, 721);
    wrong += get_value(mine, i) != expected;
  }
  for (int q = 0; q < n(); ++q) {
    for (std::int64_t i = 0; i < 1031; i += 7) {
      double expected = 0;
      for (int p = 0; p < n(); ++p) expected += int_value(seed_, p, q * 1031 + i, 721);
      wrong += get_value(all, q * 1031 + i) != expected;
    }
  }
  wrong += byte_mismatches(download(b), host_values(seed_, 777, DType::kI32, n() - 1, 722));
  EXPECT_EQ(wrong, 0);
}

// ---- No GPU needed --------------------------------------------------------------------------------------------

// Tensors labelled cuda:N that live in host memory. They are never handed to CUDA: every use below is refused
// by an argument check before any copy, which lets those checks run on hosts without a GPU.
class LabelledCudaAllocator final : public Allocator {
 public:
  explicit LabelledCudaAllocator(int device) : Allocator(Device::cuda(device)) {}
  ~LabelledCudaAllocator() override { release_cache(); }

 protected:
  void* system_allocate(std::size_t bytes) override { return std::malloc(bytes); }
  void system_free(void* ptr, std::size_t) override { std::free(ptr); }
};

class StagedHost : public ::testing::Test {
 protected:
  void SetUp() override { staged_ = make_staged(false); }
  void TearDown() override { staged_.reset(); }
  int r() const { return staged_->rank(); }
  int n() const { return staged_->size(); }

  std::unique_ptr<StagedCommunicator> staged_;
};

TEST_F(StagedHost, CpuTensorsGoToTheMpiBackendUnchanged) {
  EXPECT_EQ(staged_->backend(), "mpi+staging");
  EXPECT_EQ(staged_->inner().backend(), "mpi");
  EXPECT_EQ(staged_->name(), "world");
  EXPECT_EQ(staged_->rank(), world_rank());
  EXPECT_EQ(staged_->size(), world_size());
  const std::int64_t count = 1031;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kI32}) {
    Tensor t = Tensor::empty({count}, dtype, MemoryCategory::kActivations, cpu_allocator());
    for (std::int64_t i = 0; i < count; ++i) set_value(t, i, small_value(r(), i, 1));
    staged_->all_reduce(t, ReduceOp::kSum)->wait();
    std::int64_t wrong = 0;
    for (std::int64_t i = 0; i < count; ++i) {
      double expected = 0;
      for (int q = 0; q < n(); ++q) expected += small_value(q, i, 1);
      wrong += get_value(t, i) != expected;
    }
    EXPECT_EQ(wrong, 0) << "all_reduce " << dtype_name(dtype);

    Tensor in = Tensor::empty({count * n()}, dtype, MemoryCategory::kActivations, cpu_allocator());
    for (std::int64_t i = 0; i < count * n(); ++i) set_value(in, i, small_value(r(), i, 2));
    Tensor out = Tensor::empty({count}, dtype, MemoryCategory::kActivations, cpu_allocator());
    staged_->reduce_scatter(in, out)->wait();
    wrong = 0;
    for (std::int64_t i = 0; i < count; ++i) {
      double expected = 0;
      for (int q = 0; q < n(); ++q) expected += small_value(q, r() * count + i, 2);
      wrong += get_value(out, i) != expected;
    }
    EXPECT_EQ(wrong, 0) << "reduce_scatter " << dtype_name(dtype);

    Tensor gathered = Tensor::empty({count * n()}, dtype, MemoryCategory::kActivations, cpu_allocator());
    staged_->all_gather(out, gathered)->wait();
    wrong = 0;
    for (int q = 0; q < n(); ++q) {
      for (std::int64_t i = 0; i < count; ++i) {
        double expected = 0;
        for (int p = 0; p < n(); ++p) expected += small_value(p, q * count + i, 2);
        wrong += get_value(gathered, q * count + i) != expected;
      }
    }
    EXPECT_EQ(wrong, 0) << "all_gather " << dtype_name(dtype);

    Tensor b = Tensor::empty({count}, dtype, MemoryCategory::kActivations, cpu_allocator());
    for (std::int64_t i = 0; i < count; ++i) set_value(b, i, small_value(r(), i, 3));
    staged_->broadcast(b, n() - 1)->wait();
    wrong = 0;
    for (std::int64_t i = 0; i < count; ++i) wrong += get_value(b, i) != small_value(n() - 1, i, 3);
    EXPECT_EQ(wrong, 0) << "broadcast " << dtype_name(dtype);

    Tensor send = Tensor::empty({count}, dtype, MemoryCategory::kActivations, cpu_allocator());
    for (std::int64_t i = 0; i < count; ++i) set_value(send, i, small_value(r(), i, 4));
    Tensor recv = Tensor::empty({count}, dtype, MemoryCategory::kActivations, cpu_allocator());
    const int right = (r() + 1) % n();
    const int left = (r() + n() - 1) % n();
    staged_->batch_p2p({P2POp::send(send, right), P2POp::recv(recv, left)})->wait();
    wrong = 0;
    for (std::int64_t i = 0; i < count; ++i) wrong += get_value(recv, i) != small_value(left, i, 4);
    EXPECT_EQ(wrong, 0) << "batch_p2p " << dtype_name(dtype);
  }
  staged_->barrier()->wait();
  EXPECT_EQ(staged_->pinned_allocator().stats().requests, 0) << "a CPU tensor was staged through pinned memory";
}

TEST_F(StagedHost, SplitWrapsTheInnerSplitAndSharesThePinnedAllocator) {
  auto parity = staged_->split(r() % 2, r(), "parity");
  ASSERT_NE(parity, nullptr);
  EXPECT_EQ(parity->name(), "world/parity");
  EXPECT_EQ(parity->backend(), "mpi+staging");
  auto* staged = dynamic_cast<StagedCommunicator*>(parity.get());
  ASSERT_NE(staged, nullptr);
  EXPECT_EQ(&staged->pinned_allocator(), &staged_->pinned_allocator());
  EXPECT_EQ(staged->inner().name(), "world/parity");
  Tensor t = Tensor::empty({5}, DType::kI32, MemoryCategory::kActivations, cpu_allocator());
  for (std::int64_t i = 0; i < 5; ++i) set_value(t, i, small_value(r(), i));
  parity->all_reduce(t, ReduceOp::kSum)->wait();
  std::int64_t wrong = 0;
  for (std::int64_t i = 0; i < 5; ++i) {
    double expected = 0;
    for (int q = r() % 2; q < n(); q += 2) expected += small_value(q, i);
    wrong += get_value(t, i) != expected;
  }
  EXPECT_EQ(wrong, 0);
  auto unnamed = staged_->split(0, r());
  ASSERT_NE(unnamed, nullptr);
  EXPECT_EQ(unnamed->name(), "world/split(color=0)");
  auto none = staged_->split(-1, r());
  EXPECT_EQ(none, nullptr);
}

TEST_F(StagedHost, ArgumentErrorsNameTheOpAndBothDevices) {
  LabelledCudaAllocator cuda0(0);
  LabelledCudaAllocator cuda1(1);
  const Tensor gpu_in = Tensor::empty({4 * n()}, DType::kF32, MemoryCategory::kActivations, cuda0);
  const Tensor gpu_small = Tensor::empty({4}, DType::kF32, MemoryCategory::kActivations, cuda0);
  const Tensor gpu_other = Tensor::empty({4}, DType::kF32, MemoryCategory::kActivations, cuda1);
  const Tensor cpu_small = Tensor::empty({4}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  const Tensor cpu_big = Tensor::empty({4 * n()}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());

  std::string message = error_of([&] { staged_->reduce_scatter(gpu_in, cpu_small); });
  EXPECT_NE(message.find("reduce_scatter"), std::string::npos) << message;
  EXPECT_NE(message.find("cuda:0"), std::string::npos) << message;
  EXPECT_NE(message.find("cpu"), std::string::npos) << message;

  message = error_of([&] { staged_->all_gather(gpu_small, cpu_big); });
  EXPECT_NE(message.find("all_gather"), std::string::npos) << message;
  EXPECT_NE(message.find("cuda:0"), std::string::npos) << message;
  EXPECT_NE(message.find("cpu"), std::string::npos) << message;

  message = error_of([&] { staged_->all_reduce(gpu_small, ReduceOp::kSum, Stream(Device::cuda(3))); });
  EXPECT_NE(message.find("all_reduce on mpi+staging comm 'world'"), std::string::npos) << message;
  EXPECT_NE(message.find("cuda:0"), std::string::npos) << message;
  EXPECT_NE(message.find("cuda:3"), std::string::npos) << message;

  message = error_of([&] { staged_->batch_p2p({P2POp::send(gpu_small, r()), P2POp::recv(gpu_other, r())}); });
  EXPECT_NE(message.find("batch_p2p"), std::string::npos) << message;
  EXPECT_NE(message.find("cuda:0"), std::string::npos) << message;
  EXPECT_NE(message.find("cuda:1"), std::string::npos) << message;

  // The MPI backend alone refuses GPU tensors and points at the staging wrapper.
  comm::MpiCommunicator& mpi = dynamic_cast<comm::MpiCommunicator&>(staged_->inner());
  message = error_of([&] { mpi.all_reduce(gpu_small, ReduceOp::kSum); });
  EXPECT_NE(message.find("cuda:0"), std::string::npos) << message;
  EXPECT_NE(message.find("StagedCommunicator"), std::string::npos) << message;

  message = error_of([] { StagedCommunicator staged(nullptr); });
  EXPECT_NE(message.find("inner communicator is null"), std::string::npos) << message;
  staged_->barrier()->wait();  // every rank reached the end: none of the refusals communicated
}

}  // namespace
}  // namespace cleave::testing::staged_comm_test

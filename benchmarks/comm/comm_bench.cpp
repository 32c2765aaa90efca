// comm_bench: an nccl-tests-style sweep of the Communicator backends.
//
//   mpiexec -n N comm_bench [--backend mpi|nccl] [--ops all_reduce,reduce_scatter,all_gather,broadcast,sendrecv]
//                           [--min-bytes 8B] [--max-bytes 64MiB] [--factor 2] [--warmup 5] [--iters 20]
//                           [--dtype f32] [--deterministic]
//
// For every op and size: one validation run against a closed form (every rank's input is a small integer
// pattern, so the expected output is known exactly; #wrong counts mismatching elements on any rank), then
// warm-up iterations, then timed iterations. Each timed iteration starts after a barrier; its time is the
// slowest rank's, and the table reports the median over iterations. The same op is also timed through the
// raw library call (blocking MPI_Allreduce etc., or ncclAllReduce + stream sync) as a baseline in the same
// run, and `vs raw` is our time over the baseline's.
//
// Sizes follow nccl-tests: `size` is the all_reduce / broadcast / sendrecv buffer, the all_gather output and
// the reduce_scatter input (all n blocks). algbw = size / time. busbw = algbw × factor, the per-rank link
// traffic that an optimal algorithm needs, so figures compare across rank counts:
//   all_reduce 2(n-1)/n,  reduce_scatter (n-1)/n,  all_gather (n-1)/n,  broadcast 1,  sendrecv 1.
// Prints a table on rank 0 and one JSON line per row; exits non-zero if any #wrong is non-zero.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cleave/config.hpp"
#include "engine/comm/host_reduce.hpp"
#include "engine/comm/mpi/mpi_runtime.hpp"
#if CLEAVE_BENCH_NCCL
#include "engine/comm/nccl/cuda_check.hpp"
#include "engine/comm/nccl/nccl_communicator.hpp"
#include "engine/cuda/caching_allocator.hpp"
#endif

namespace cleave::bench {
namespace {

struct Args {
  std::string backend = "mpi";
  std::vector<std::string> ops{"all_reduce", "reduce_scatter", "all_gather", "broadcast", "sendrecv"};
  std::int64_t min_bytes = 8;
  std::int64_t max_bytes = 64ll << 20;
  int factor = 2;
  int warmup = 5;
  int iters = 20;
  DType dtype = DType::kF32;
  bool deterministic = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      CLEAVE_CHECK(i + 1 < argc, "comm_bench: {} needs a value", flag);
      return argv[++i];
    };
    if (flag == "--backend") a.backend = value();
    else if (flag == "--ops") {
      a.ops.clear();
      std::stringstream ss(value());
      for (std::string op; std::getline(ss, op, ',');) a.ops.push_back(op);
    } else if (flag == "--min-bytes") a.min_bytes = parse_bytes(value(), "--min-bytes");
    else if (flag == "--max-bytes") a.max_bytes = parse_bytes(value(), "--max-bytes");
    else if (flag == "--factor") a.factor = std::stoi(value());
    else if (flag == "--warmup") a.warmup = std::stoi(value());
    else if (flag == "--iters") a.iters = std::stoi(value());
    else if (flag == "--dtype") a.dtype = parse_dtype(value());
    else if (flag == "--deterministic") a.deterministic = true;
    else CLEAVE_THROW("comm_bench: unknown flag '{}' (see the comment at the top of comm_bench.cpp)", flag);
  }
  CLEAVE_CHECK(a.backend == "mpi" || a.backend == "nccl", "comm_bench: --backend must be mpi or nccl, got '{}'",
               a.backend);
  CLEAVE_CHECK(a.factor >= 2 && a.iters >= 1 && a.warmup >= 0 && a.min_bytes >= 1 && a.max_bytes >= a.min_bytes,
               "comm_bench: need factor >= 2, iters >= 1, warmup >= 0, 1 <= min-bytes <= max-bytes");
  for (const auto& op : a.ops) {
    CLEAVE_CHECK(op == "all_reduce" || op == "reduce_scatter" || op == "all_gather" || op == "broadcast" ||
                     op == "sendrecv",
                 "comm_bench: unknown op '{}'", op);
  }
  return a;
}

double bus_factor(const std::string& op, int n) {
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "reduce_scatter" || op == "all_gather") return static_cast<double>(n - 1) / n;
  return 1.0;
}

// The pattern every rank fills: a small integer, exact in every dtype, and sums over <= 8 ranks stay exact.
double pattern(int rank, std::int64_t i) { return static_cast<double>((i * 7 + rank * 3) % 11 + 1); }

void set(void* p, DType dtype, std::int64_t i, double v) {
  switch (dtype) {
    case DType::kF32: static_cast<float*>(p)[i] = static_cast<float>(v); return;
    case DType::kBF16: static_cast<std::uint16_t*>(p)[i] = float_to_bf16(static_cast<float>(v)); return;
    case DType::kF16: static_cast<std::uint16_t*>(p)[i] = comm::float_to_f16(static_cast<float>(v)); return;
    case DType::kI32: static_cast<std::int32_t*>(p)[i] = static_cast<std::int32_t>(v); return;
    case DType::kI64: static_cast<std::int64_t*>(p)[i] = static_cast<std::int64_t>(v); return;
    case DType::kU16: static_cast<std::uint16_t*>(p)[i] = static_cast<std::uint16_t>(v); return;
  }
}
double get(const void* p, DType dtype, std::int64_t i) {
  switch (dtype) {
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kBF16: return bf16_to_float(static_cast<const std::uint16_t*>(p)[i]);
    case DType::kF16: return comm::f16_to_float(static_cast<const std::uint16_t*>(p)[i]);
    case DType::kI32: return static_cast<const std::int32_t*>(p)[i];
    case DType::kI64: return static_cast<double>(static_cast<const std::int64_t*>(p)[i]);
    case DType::kU16: return static_cast<const std::uint16_t*>(p)[i];
  }
  return 0;
}

// Buffers of one size: host mirrors for filling and checking, and the tensors the backend works on.
struct Buffers {
  Tensor input;   // all_reduce / broadcast: the buffer; reduce_scatter: n blocks; all_gather: one block
  Tensor output;  // reduce_scatter: one block; all_gather: n blocks; sendrecv: the receive buffer
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual comm::Communicator& comm() = 0;
  virtual Tensor make(std::int64_t count, DType dtype) = 0;
  virtual void upload(const Tensor& t, const std::vector<char>& host) = 0;
  virtual std::vector<char> download(const Tensor& t) = 0;
  virtual void sync() = 0;  // device idle (no-op on the CPU)
  // The raw library call for one op, blocking until complete: the baseline.
  virtual void raw(const std::string& op, const Buffers& b) = 0;
};

MPI_Datatype mpi_type(DType d) {
  switch (d) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kI32: return MPI_INT32_T;
    case DType::kI64: return MPI_INT64_T;
    default: return MPI_UINT16_T;
  }
}

class MpiBackend final : public Backend {
 public:
  explicit MpiBackend(const comm::MpiRuntime& runtime, bool deterministic) {
    comm::MpiOptions options;
    options.deterministic = deterministic;
    options.timeout_s = 120;
    comm_ = runtime.world(options);
  }
  comm::Communicator& comm() override { return *comm_; }
  Tensor make(std::int64_t count, DType dtype) override {
    return Tensor::empty({count}, dtype, MemoryCategory::kCommunication, cpu_allocator());
  }
  void upload(const Tensor& t, const std::vector<char>& host) override { std::memcpy(t.raw_data(), host.data(), t.nbytes()); }
  std::vector<char> download(const Tensor& t) override {
    std::vector<char> host(t.nbytes());
    std::memcpy(host.data(), t.raw_data(), t.nbytes());
    return host;
  }
  void sync() override {}
  void raw(const std::string& op, const Buffers& b) override {
    const MPI_Comm c = comm_->native();
    const DType d = b.input.dtype();
    const int n = comm_->size();
    if (op == "all_reduce") {
      MPI_Allreduce(MPI_IN_PLACE, b.input.raw_data(), static_cast<int>(b.input.numel()), mpi_type(d), MPI_SUM, c);
    } else if (op == "reduce_scatter") {
      MPI_Reduce_scatter_block(b.input.raw_data(), b.output.raw_data(), static_cast<int>(b.output.numel()), mpi_type(d),
                               MPI_SUM, c);
    } else if (op == "all_gather") {
      MPI_Allgather(b.input.raw_data(), static_cast<int>(b.input.numel()), mpi_type(d), b.output.raw_data(),
                    static_cast<int>(b.input.numel()), mpi_type(d), c);
    } else if (op == "broadcast") {
      MPI_Bcast(b.input.raw_data(), static_cast<int>(b.input.numel()), mpi_type(d), 0, c);
    } else {
      const int r = comm_->rank();
      MPI_Sendrecv(b.input.raw_data(), static_cast<int>(b.input.numel()), mpi_type(d), (r + 1) % n, 0,
                   b.output.raw_data(), static_cast<int>(b.output.numel()), mpi_type(d), (r + n - 1) % n, 0, c,
                   MPI_STATUS_IGNORE);
    }
  }

 private:
  std::unique_ptr<comm::MpiCommunicator> comm_;
};

#if CLEAVE_BENCH_NCCL
ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
    default: return ncclUint8;
  }
}

class NcclBackend final : public Backend {
 public:
  NcclBackend(const comm::MpiRuntime& runtime, bool deterministic) {
    comm::MpiOptions mpi_options;
    mpi_options.timeout_s = 120;
    mpi_ = runtime.world(mpi_options);
    comm::NcclOptions options;
    options.deterministic = deterministic;
    options.timeout_s = 120;
    comm_ = std::make_unique<comm::NcclCommunicator>(*mpi_, options);
    allocator_ = std::make_unique<cuda::CudaCachingAllocator>(comm_->device());
  }
  ~NcclBackend() override {
    comm_.reset();
    allocator_.reset();
  }
  comm::Communicator& comm() override { return *comm_; }
  Tensor make(std::int64_t count, DType dtype) override {
    return Tensor::empty({count}, dtype, MemoryCategory::kCommunication, *allocator_);
  }
  void upload(const Tensor& t, const std::vector<char>& host) override {
    CLEAVE_CUDA_CHECK(cudaMemcpy(t.raw_data(), host.data(), t.nbytes(), cudaMemcpyHostToDevice));
  }
  std::vector<char> download(const Tensor& t) override {
    std::vector<char> host(t.nbytes());
    CLEAVE_CUDA_CHECK(cudaMemcpy(host.data(), t.raw_data(), t.nbytes(), cudaMemcpyDeviceToHost));
    return host;
  }
  void sync() override { CLEAVE_CUDA_CHECK(cudaDeviceSynchronize()); }
  void raw(const std::string& op, const Buffers& b) override {
    const ncclComm_t c = comm_->native();
    const cudaStream_t s = comm_->stream();
    const DType d = b.input.dtype();
    const int n = comm_->size();
    const int r = comm_->rank();
    if (op == "all_reduce") {
      CLEAVE_NCCL_CHECK(ncclAllReduce(b.input.raw_data(), b.input.raw_data(), b.input.numel(), nccl_type(d), ncclSum, c, s));
    } else if (op == "reduce_scatter") {
      CLEAVE_NCCL_CHECK(ncclReduceScatter(b.input.raw_data(), b.output.raw_data(), b.output.numel(), nccl_type(d), ncclSum, c, s));
    } else if (op == "all_gather") {
      CLEAVE_NCCL_CHECK(ncclAllGather(b.input.raw_data(), b.output.raw_data(), b.input.nbytes(), ncclInt8, c, s));
    } else if (op == "broadcast") {
      CLEAVE_NCCL_CHECK(ncclBroadcast(b.input.raw_data(), b.input.raw_data(), b.input.nbytes(), ncclInt8, 0, c, s));
    } else {
      CLEAVE_NCCL_CHECK(ncclGroupStart());
      CLEAVE_NCCL_CHECK(ncclSend(b.input.raw_data(), b.input.nbytes(), ncclInt8, (r + 1) % n, c, s));
      CLEAVE_NCCL_CHECK(ncclRecv(b.output.raw_data(), b.output.nbytes(), ncclInt8, (r + n - 1) % n, c, s));
      CLEAVE_NCCL_CHECK(ncclGroupEnd());
    }
    // Non-blocking communicator: wait until the call is accepted, then for the stream.
    ncclResult_t state = ncclInProgress;
    do {
      CLEAVE_NCCL_CHECK(ncclCommGetAsyncError(c, &state));
    } while (state == ncclInProgress);
    CLEAVE_CUDA_CHECK(cudaStreamSynchronize(s));
  }

 private:
  std::unique_ptr<comm::MpiCommunicator> mpi_;
  std::unique_ptr<comm::NcclCommunicator> comm_;
  std::unique_ptr<cuda::CudaCachingAllocator> allocator_;
};
#endif

// Elements per rank-visible buffer for `bytes` of op `op` (all_gather / reduce_scatter: divisible by n).
std::int64_t count_for(const std::string& op, std::int64_t bytes, DType dtype, int n) {
  std::int64_t count = bytes / static_cast<std::int64_t>(dtype_size(dtype));
  if (op == "all_gather" || op == "reduce_scatter") count = count / n * n;
  return count;
}

Buffers allocate(Backend& be, const std::string& op, std::int64_t count, DType dtype, int n) {
  Buffers b;
  if (op == "reduce_scatter") {
    b.input = be.make(count, dtype);
    b.output = be.make(count / n, dtype);
  } else if (op == "all_gather") {
    b.input = be.make(count / n, dtype);
    b.output = be.make(count, dtype);
  } else {
    b.input = be.make(count, dtype);
    b.output = be.make(op == "sendrecv" ? count : 1, dtype);
  }
  return b;
}

void fill(Backend& be, const Buffers& b, int rank) {
  std::vector<char> host(b.input.nbytes());
  for (std::int64_t i = 0; i < b.input.numel(); ++i) set(host.data(), b.input.dtype(), i, pattern(rank, i));
  be.upload(b.input, host);
}

comm::WorkPtr run(comm::Communicator& c, const std::string& op, const Buffers& b) {
  if (op == "all_reduce") return c.all_reduce(b.input, comm::ReduceOp::kSum);
  if (op == "reduce_scatter") return c.reduce_scatter(b.input, b.output);
  if (op == "all_gather") return c.all_gather(b.input, b.output);
  if (op == "broadcast") return c.broadcast(b.input, 0);
  const int n = c.size();
  const int r = c.rank();
  return c.batch_p2p({comm::P2POp::send(b.input, (r + 1) % n), comm::P2POp::recv(b.output, (r + n - 1) % n)});
}

// Elements that differ from the closed form on this rank.
std::int64_t count_wrong(Backend& be, const std::string& op, const Buffers& b, int rank, int n) {
  const DType d = b.input.dtype();
  std::int64_t wrong = 0;
  if (op == "all_reduce") {
    const auto out = be.download(b.input);
    for (std::int64_t i = 0; i < b.input.numel(); ++i) {
      double expected = 0;
      for (int q = 0; q < n; ++q) expected += pattern(q, i);
      wrong += get(out.data(), d, i) != expected;
    }
  } else if (op == "reduce_scatter") {
    const auto out = be.download(b.output);
    const std::int64_t m = b.output.numel();
    for (std::int64_t i = 0; i < m; ++i) {
      double expected = 0;
      for (int q = 0; q < n; ++q) expected += pattern(q, rank * m + i);
      wrong += get(out.data(), d, i) != expected;
    }
  } else if (op == "all_gather") {
    const auto out = be.download(b.output);
    const std::int64_t m = b.input.numel();
    for (int q = 0; q < n; ++q) {
      for (std::int64_t i = 0; i < m; ++i) wrong += get(out.data(), d, q * m + i) != pattern(q, i);
    }
  } else if (op == "broadcast") {
    const auto out = be.download(b.input);
    for (std::int64_t i = 0; i < b.input.numel(); ++i) wrong += get(out.data(), d, i) != pattern(0, i);
  } else {
    const auto out = be.download(b.output);
    const int left = (rank + n - 1) % n;
    for (std::int64_t i = 0; i < b.output.numel(); ++i) wrong += get(out.data(), d, i) != pattern(left, i);
  }
  return wrong;
}

// Median over iterations of the slowest rank's time (seconds).
template <typename Op>
double time_median(Backend& be, MPI_Comm world, int warmup, int iters, Op&& op) {
  for (int i = 0; i < warmup; ++i) op();
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    be.sync();
    MPI_Barrier(world);
    const double t0 = MPI_Wtime();
    op();
    double dt = MPI_Wtime() - t0;
    double slowest = 0;
    MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, world);
    times.push_back(slowest);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

std::string human(std::int64_t bytes) {
  if (bytes >= (1 << 20)) return fmt::format("{}MiB", bytes >> 20);
  if (bytes >= (1 << 10)) return fmt::format("{}KiB", bytes >> 10);
  return fmt::format("{}B", bytes);
}

int run_bench(int argc, char** argv) {
  comm::MpiRuntime runtime(&argc, &argv);
  const Args args = parse(argc, argv);
  std::unique_ptr<Backend> backend;
  if (args.backend == "mpi") {
    backend = std::make_unique<MpiBackend>(runtime, args.deterministic);
  } else {
#if CLEAVE_BENCH_NCCL
    backend = std::make_unique<NcclBackend>(runtime, args.deterministic);
#else
    CLEAVE_THROW("comm_bench: --backend nccl needs a CUDA build (this one has CLEAVE_WITH_CUDA off)");
#endif
  }
  comm::Communicator& c = backend->comm();
  const int n = c.size();
  const int rank = c.rank();
  const bool root = runtime.world_rank() == 0;
  if (root) {
    std::printf("# comm_bench: backend %s, %d ranks, dtype %s, %s mode, warmup %d, iters %d\n", args.backend.c_str(), n,
                std::string(dtype_name(args.dtype)).c_str(), args.deterministic ? "deterministic" : "plain",
                args.warmup, args.iters);
    std::printf("# time = median over iterations of the slowest rank; algbw = size / time;"
                " busbw = algbw x factor:\n#   all_reduce 2(n-1)/n = %.3f, reduce_scatter and all_gather (n-1)/n = %.3f,"
                " broadcast and sendrecv 1\n# raw = the library call without Cleave (blocking), vs raw = time / raw\n",
                bus_factor("all_reduce", n), bus_factor("all_gather", n));
    std::printf("%-15s %9s %10s %11s %11s %11s %11s %8s %7s\n", "op", "size", "count", "time(us)", "algbw(GB/s)",
                "busbw(GB/s)", "raw(us)", "vs raw", "#wrong");
  }
  std::int64_t total_wrong = 0;
  std::vector<std::string> json;
  for (const std::string& op : args.ops) {
    for (std::int64_t bytes = args.min_bytes; bytes <= args.max_bytes; bytes *= args.factor) {
      const std::int64_t count = count_for(op, bytes, args.dtype, n);
      if (count == 0) continue;
      const Buffers b = allocate(*backend, op, count, args.dtype, n);
      fill(*backend, b, rank);
      run(c, op, b)->wait();
      std::int64_t wrong_here = count_wrong(*backend, op, b, rank, n);
      std::int64_t wrong = 0;
      MPI_Allreduce(&wrong_here, &wrong, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
      total_wrong += wrong;
      const double t = time_median(*backend, MPI_COMM_WORLD, args.warmup, args.iters, [&] { run(c, op, b)->wait(); });
      const double raw = time_median(*backend, MPI_COMM_WORLD, args.warmup, args.iters, [&] { backend->raw(op, b); });
      const std::int64_t size = count * static_cast<std::int64_t>(dtype_size(args.dtype));
      const double algbw = static_cast<double>(size) / t / 1e9;
      const double busbw = algbw * bus_factor(op, n);
      if (root) {
        std::printf("%-15s %9s %10lld %11.1f %11.3f %11.3f %11.1f %8.2f %7lld\n", op.c_str(), human(size).c_str(),
                    static_cast<long long>(count), t * 1e6, algbw, busbw, raw * 1e6, t / raw,
                    static_cast<long long>(wrong));
        json.push_back(fmt::format(
            R"({{"bench":"comm","backend":"{}","op":"{}","ranks":{},"dtype":"{}","deterministic":{},"bytes":{},)"
            R"("time_us":{:.2f},"algbw_gbs":{:.4f},"busbw_gbs":{:.4f},"raw_time_us":{:.2f},"wrong":{}}})",
            args.backend, op, n, dtype_name(args.dtype), args.deterministic, size, t * 1e6, algbw, busbw, raw * 1e6,
            wrong));
      }
    }
  }
  if (root) {
    for (const auto& line : json) std::printf("%s\n", line.c_str());
    std::printf("# #wrong total: %lld\n", static_cast<long long>(total_wrong));
  }
  return total_wrong == 0 ? 0 : 1;
}

}  // namespace
}  // namespace cleave::bench

int main(int argc, char** argv) {
  try {
    return cleave::bench::run_bench(argc, argv);
  } catch (const std::exception& e) {
    cleave::comm::abort_job(e.what());
  }
}

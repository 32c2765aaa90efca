// Ring attention's core (layers/context_parallel/ring_attention.cpp: forward, then backward without recomputation)
// on the CPU under mpiexec (the world is the cp group): its median wall time per forward + backward, the copy slots
// it calls per pass (copy, copy_2d, copy_3d: each a kernel launch on a GPU, counted through a wrapped CPU backend
// table), and an FNV-1a hash of every rank's out and dqkv bits, so two builds (RESULTS-2026-11-30-i-ring-copies.md:
// per-sample copy_2d before, one copy_3d per chunk after) are shown to compute the same bits before their times are
// compared. Inputs are fixed by the seed; rank 0 prints.
// Usage: mpiexec -n CP ring_copies_bench B T HEADS HEAD_DIM fp32|bf16 [repetitions=9]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/comm/mpi/mpi_communicator.hpp"
#include "engine/comm/mpi/mpi_runtime.hpp"
#include "engine/core/rng.hpp"
#include "kernels/ops/backend.hpp"
#include "layers/context_parallel/ring_attention.hpp"

namespace {

using namespace cleave;

// The CPU table with its copy slots counted (reached through ctx.backend, as tests/e2e/cuda_coverage_test.cpp does).
struct CountingBackend : ops::Backend {
  mutable std::int64_t copies = 0, copies_2d = 0, copies_3d = 0;
};
const CountingBackend& counting(const ops::Context& ctx) { return *static_cast<const CountingBackend*>(ctx.backend); }
void copy(const ops::Context& ctx, const Tensor& src, const Tensor& dst) {
  ++counting(ctx).copies;
  ops::cpu_backend().copy(ctx, src, dst);
}
void copy_2d(const ops::Context& ctx, const Tensor& src, const Tensor& dst, const ops::Copy2d& s) {
  ++counting(ctx).copies_2d;
  ops::cpu_backend().copy_2d(ctx, src, dst, s);
}
void copy_3d(const ops::Context& ctx, const Tensor& src, const Tensor& dst, const ops::Copy3d& s) {
  ++counting(ctx).copies_3d;
  ops::cpu_backend().copy_3d(ctx, src, dst, s);
}

std::uint64_t fnv(const Tensor& t, std::uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(t.raw_data());
  for (std::size_t i = 0; i < t.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

Tensor random_tensor(const Shape& shape, DType dtype, std::uint64_t seed) {
  Tensor f = Tensor::empty(shape, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  rng::fill_normal(f.data<float>(), f.numel(), seed, rng::hash_key("ring-copies-bench"), 0.0f, 1.0f);
  if (dtype == DType::kF32) return f;
  Tensor out = Tensor::empty(shape, dtype, MemoryCategory::kActivations, cpu_allocator());
  ops::copy(ops::Context{}, f, out);
  return out;
}

int run(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: mpiexec -n CP %s B T HEADS HEAD_DIM fp32|bf16 [repetitions=9]\n", argv[0]);
    return 2;
  }
  const std::int64_t b = std::atoll(argv[1]), t = std::atoll(argv[2]), heads = std::atoll(argv[3]),
                     hd = std::atoll(argv[4]);
  const bool bf16 = std::string(argv[5]) == "bf16";
  const int reps = argc > 6 ? std::atoi(argv[6]) : 9;
  comm::MpiOptions options;
  comm::MpiCommunicator world(MPI_COMM_WORLD, options, "world");
  const int cp = world.size(), rank = world.rank();
  if (t % (2 * cp) != 0) {
    std::fprintf(stderr, "T %lld must split into 2 x cp = %d chunks\n", static_cast<long long>(t), 2 * cp);
    return 2;
  }
  CountingBackend table;
  static_cast<ops::Backend&>(table) = ops::cpu_backend();
  table.name = "cpu (counting copies)";
  table.copy = copy;
  table.copy_2d = copy_2d;
  table.copy_3d = copy_3d;
  layers::Context ctx;
  ctx.backend = &table;
  ctx.precision = bf16 ? ops::Precision::kBf16 : ops::Precision::kFp32;
  ctx.cp_comm = &world;
  ctx.cp = {cp, rank, layers::CpExchange::kRing};
  const DType dtype = bf16 ? DType::kBF16 : DType::kF32;
  const std::int64_t tl = t / cp, w = heads * hd;
  const Tensor qkv = random_tensor(Shape{b, tl, 3 * w}, dtype, 11 + static_cast<std::uint64_t>(rank));
  const Tensor dout = random_tensor(Shape{b, tl, w}, dtype, 101 + static_cast<std::uint64_t>(rank));
  const layers::RingHeads h{heads, heads, hd, 0};

  std::vector<double> ms;
  std::uint64_t hash = 1469598103934665603ull;
  std::int64_t per_pass[2][3] = {};
  for (int rep = 0; rep < reps + 1; ++rep) {  // the first is the warm-up
    table.copies = table.copies_2d = table.copies_3d = 0;
    world.barrier()->wait();
    const auto start = std::chrono::steady_clock::now();
    layers::Stash stash;
    const Tensor out = layers::ring_attention_forward(ctx, qkv, h, false, stash, "bench");
    const std::int64_t forward[3] = {table.copies, table.copies_2d, table.copies_3d};
    const Tensor dqkv = layers::ring_attention_backward(ctx, dout, h, false, stash, "bench");
    const double elapsed = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    world.barrier()->wait();
    if (rep == 0) {
      hash = fnv(dqkv, fnv(out, hash));
      for (int i = 0; i < 3; ++i) per_pass[0][i] = forward[i];
      per_pass[1][0] = table.copies - forward[0];
      per_pass[1][1] = table.copies_2d - forward[1];
      per_pass[1][2] = table.copies_3d - forward[2];
    } else {
      ms.push_back(elapsed);
    }
  }
  std::sort(ms.begin(), ms.end());
  std::vector<std::uint64_t> hashes(static_cast<std::size_t>(cp));
  MPI_Gather(&hash, 1, MPI_UINT64_T, hashes.data(), 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("ring cp %d B %lld T %lld heads %lld hd %lld %s: median %.3f ms (min %.3f, max %.3f, %d reps)\n", cp,
                static_cast<long long>(b), static_cast<long long>(t), static_cast<long long>(heads),
                static_cast<long long>(hd), bf16 ? "bf16" : "fp32", ms[ms.size() / 2], ms.front(), ms.back(), reps);
    std::printf("  copy slots, forward: copy %lld copy_2d %lld copy_3d %lld; backward: copy %lld copy_2d %lld "
                "copy_3d %lld\n",
                static_cast<long long>(per_pass[0][0]), static_cast<long long>(per_pass[0][1]),
                static_cast<long long>(per_pass[0][2]), static_cast<long long>(per_pass[1][0]),
                static_cast<long long>(per_pass[1][1]), static_cast<long long>(per_pass[1][2]));
    std::printf("  bits (FNV-1a of out, dqkv per rank):");
    for (const std::uint64_t x : hashes) std::printf(" %016llx", static_cast<unsigned long long>(x));
    std::printf("\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  cleave::comm::MpiRuntime runtime(&argc, &argv);
  return run(argc, argv);
}

// The moe layer's memory-bound routing kernels on the CPU against what the roofline prices them at
// (partition::moe_routing_work: bytes moved / the profile's memory bandwidth; a CPU profile has no launch cost).
// For one micro-batch of N tokens, D wide, E experts, top-k, f32 or bf16 activations: the forward's moe_gather
// (x -> xp) and moe_combine (o -> y, weighted), the backward's moe_combine_weight_grad, moe_gather (dy -> d_o,
// scaled), moe_combine (dxp -> dx) and the logits' gradient cast (ops::copy f32 -> the compute dtype), each through
// the op seam as layers/moe/moe_mlp.cpp calls it, on a random routing (each token's k distinct experts uniform,
// rows grouped per expert, tokens ascending: router.cpp's layout).
//
// What it asserts before timing: every op's output against a double reference (gather exact, the rest within
// 1e-5 relative in f32, 1e-2 in bf16), and that the per-op bytes below sum to moe_routing_work's F and I totals;
// else it exits non-zero. Bandwidth: the one calibrate_this_machine gives a CPU profile (engine/planner/
// hardware_profile.cpp: y += 0.5·x over two 8 MiB f32 vectors, 3 · 8 MiB per pass), measured here in the same
// interleaved rounds as the ops. Reports each op's median wall time per call over the rounds, its modelled bytes,
// the predicted time at the median bandwidth, and measured / predicted as the median over rounds of the round's own
// ratio (the op against that round's bandwidth: a shared machine's load moves both alike). Usage:
//   moe_routing_bench N D E K f32|bf16 [threads=2] [rounds=41]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops/ops.hpp"
#include "partition/block_work.hpp"
#include "partition/families/moe.hpp"
#include "partition/model_spec.hpp"

namespace {

using namespace cleave;

struct Routing {  // router.cpp's tables for a random choice
  std::vector<std::int32_t> row_token, token_row;
  std::vector<float> weight, row_weight;
};

Routing random_routing(std::int64_t n, std::int64_t e, std::int64_t k, std::mt19937& rng) {
  std::vector<std::int32_t> expert(static_cast<std::size_t>(n * k));
  std::vector<std::int64_t> counts(static_cast<std::size_t>(e), 0);
  std::vector<std::int32_t> all(static_cast<std::size_t>(e));
  std::iota(all.begin(), all.end(), 0);
  for (std::int64_t t = 0; t < n; ++t) {
    std::shuffle(all.begin(), all.end(), rng);
    std::sort(all.begin(), all.begin() + k);
    for (std::int64_t j = 0; j < k; ++j) {
      expert[static_cast<std::size_t>(t * k + j)] = all[static_cast<std::size_t>(j)];
      ++counts[static_cast<std::size_t>(all[static_cast<std::size_t>(j)])];
    }
  }
  std::vector<std::int64_t> next(static_cast<std::size_t>(e), 0);
  for (std::int64_t i = 1; i < e; ++i) next[i] = next[i - 1] + counts[i - 1];
  Routing r;
  r.row_token.resize(static_cast<std::size_t>(n * k));
  r.token_row.resize(static_cast<std::size_t>(n * k));
  r.weight.resize(static_cast<std::size_t>(n * k));
  r.row_weight.resize(static_cast<std::size_t>(n * k));
  std::uniform_real_distribution<float> w(0.1f, 0.9f);
  for (std::int64_t s = 0; s < n * k; ++s) {
    const std::int64_t row = next[static_cast<std::size_t>(expert[static_cast<std::size_t>(s)])]++;
    r.row_token[static_cast<std::size_t>(row)] = static_cast<std::int32_t>(s / k);
    r.token_row[static_cast<std::size_t>(s)] = static_cast<std::int32_t>(row);
    r.weight[static_cast<std::size_t>(s)] = w(rng);
    r.row_weight[static_cast<std::size_t>(row)] = r.weight[static_cast<std::size_t>(s)];
  }
  return r;
}

Tensor host(const Shape& shape, DType dtype) {
  return Tensor::empty(shape, dtype, MemoryCategory::kActivations, cpu_allocator());
}

Tensor random_tensor(const Shape& shape, DType dtype, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(shape.numel()));
  for (float& x : v) x = dist(rng);
  const Tensor f = Tensor::from_floats(v, shape);
  if (dtype == DType::kF32) return f;
  Tensor out = host(shape, dtype);
  ops::copy(ops::Context{}, f, out);
  return out;
}

template <typename T>
Tensor table(const std::vector<T>& v, const Shape& shape, DType dtype) {
  Tensor t = host(shape, dtype);
  std::memcpy(t.raw_data(), v.data(), v.size() * sizeof(T));
  return t;
}

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "moe_routing_bench: %s\n", what.c_str());
  std::exit(1);
}

void check_close(const std::vector<float>& got, const std::vector<double>& want, double tol, const char* op) {
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (std::abs(got[i] - want[i]) > tol * (1.0 + std::abs(want[i]))) {
      fail(std::string(op) + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) + ", want " +
           std::to_string(want[i]));
    }
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Op {
  const char* name;
  const char* pass;
  double bytes;
  std::function<void()> run;
  std::vector<double> seconds;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) fail("usage: moe_routing_bench N D E K f32|bf16 [threads=2] [rounds=41]");
  const std::int64_t n = std::atoll(argv[1]), d = std::atoll(argv[2]), e = std::atoll(argv[3]), k = std::atoll(argv[4]);
  const std::string precision = argv[5];
  const int threads = argc > 6 ? std::atoi(argv[6]) : 2;
  const int rounds = argc > 7 ? std::atoi(argv[7]) : 41;
  if (n < 1 || d < 1 || e < 1 || k < 1 || k > e || (precision != "f32" && precision != "bf16") || threads < 1 ||
      rounds < 1) {
    fail("bad arguments: N, D, E >= 1, 1 <= K <= E, f32 or bf16, threads and rounds >= 1");
  }
  const DType dt = precision == "f32" ? DType::kF32 : DType::kBF16;
  const double b = precision == "f32" ? 4 : 2, r = static_cast<double>(n * k), nn = static_cast<double>(n);
  const double dd = static_cast<double>(d), ee = static_cast<double>(e);
  ops::configure_cpu_threads(threads);
  const auto resources = ops::make_device_resources(Device::cpu());
  const ops::Context ctx{.resources = resources.get()};

  std::mt19937 rng(7);
  const Routing rt = random_routing(n, e, k, rng);
  const std::int64_t rows = n * k;
  const Tensor row_token = table(rt.row_token, Shape{rows}, DType::kI32);
  const Tensor token_row = table(rt.token_row, Shape{n, k}, DType::kI32);
  const Tensor weight = table(rt.weight, Shape{n, k}, DType::kF32);
  const Tensor row_weight = table(rt.row_weight, Shape{rows}, DType::kF32);
  const Tensor x = random_tensor(Shape{n, d}, dt, rng), dy = random_tensor(Shape{n, d}, dt, rng);
  const Tensor o = random_tensor(Shape{rows, d}, dt, rng), dxp = random_tensor(Shape{rows, d}, dt, rng);
  const Tensor dlogits_f32 = random_tensor(Shape{n, e}, DType::kF32, rng);
  const Tensor xp = host(Shape{rows, d}, dt), d_o = host(Shape{rows, d}, dt);
  const Tensor y = host(Shape{n, d}, dt), dx = host(Shape{n, d}, dt), dlogits = host(Shape{n, e}, dt);
  const Tensor dweight = host(Shape{n, k}, DType::kF32);

  // The ops as moe_mlp.cpp calls them, with the bytes moe_routing_work's header gives each (4-byte indices).
  std::vector<Op> ops_list = {
      {"gather x -> xp", "F", 2 * r * dd * b + 4 * r, [&] { ops::moe_gather(ctx, x, row_token, Tensor(), xp); }, {}},
      {"combine o -> y (weighted)", "F", r * dd * b + nn * dd * b + 8 * r,
       [&] { ops::moe_combine(ctx, o, token_row, weight, y); }, {}},
      {"combine weight grad", "I", nn * dd * b + r * dd * b + 8 * r,
       [&] { ops::moe_combine_weight_grad(ctx, dy, o, token_row, dweight); }, {}},
      {"gather dy -> d_o (scaled)", "I", 2 * r * dd * b + 8 * r,
       [&] { ops::moe_gather(ctx, dy, row_token, row_weight, d_o); }, {}},
      {"combine dxp -> dx", "I", r * dd * b + nn * dd * b + 4 * r,
       [&] { ops::moe_combine(ctx, dxp, token_row, Tensor(), dx); }, {}},
      {"dlogits cast", "I", nn * ee * (4 + b), [&] { ops::copy(ctx, dlogits_f32, dlogits); }, {}},
  };

  // The model's pass totals: the ops above must add up to them.
  partition::BlockSpec block;
  block.name = "bench";
  block.kind = partition::BlockKind::kMoeBlock;
  block.seq_len = n;
  block.in_features = d;
  block.n_experts = e;
  block.top_k = k;
  const partition::BlockWork model = partition::moe_routing_work(block, dt, 1);
  double f_bytes = 0, i_bytes = 0;
  for (const Op& op : ops_list) (op.pass[0] == 'F' ? f_bytes : i_bytes) += op.bytes;
  if (f_bytes != model.forward.stream_bytes || i_bytes != model.input_grad.stream_bytes) {
    fail("the ops' bytes (" + std::to_string(f_bytes) + ", " + std::to_string(i_bytes) +
         ") are not moe_routing_work's (" + std::to_string(model.forward.stream_bytes) + ", " +
         std::to_string(model.input_grad.stream_bytes) + ")");
  }

  // Results first, against double references.
  for (Op& op : ops_list) op.run();
  const double tol = dt == DType::kF32 ? 1e-5 : 1e-2;
  const std::vector<float> xv = x.to_floats(), dyv = dy.to_floats(), ov = o.to_floats(), dxpv = dxp.to_floats();
  std::vector<double> want_xp(static_cast<std::size_t>(rows * d)), want_do(want_xp.size());
  std::vector<double> want_y(static_cast<std::size_t>(n * d), 0.0), want_dx(want_y.size(), 0.0);
  std::vector<double> want_dw(static_cast<std::size_t>(n * k), 0.0);
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t c = 0; c < d; ++c) {
      const auto src = static_cast<std::size_t>(rt.row_token[i] * d + c);
      const auto dst = static_cast<std::size_t>(i * d + c);
      want_xp[dst] = xv[src];
      want_do[dst] = static_cast<double>(rt.row_weight[i]) * dyv[src];
    }
  }
  for (std::int64_t t = 0; t < n; ++t) {
    for (std::int64_t j = 0; j < k; ++j) {
      const std::int64_t row = rt.token_row[t * k + j];
      for (std::int64_t c = 0; c < d; ++c) {
        const double src = ov[row * d + c];
        want_y[t * d + c] += static_cast<double>(rt.weight[t * k + j]) * src;
        want_dx[t * d + c] += dxpv[row * d + c];
        want_dw[t * k + j] += static_cast<double>(dyv[t * d + c]) * src;
      }
    }
  }
  check_close(xp.to_floats(), want_xp, 0.0, "gather");
  check_close(d_o.to_floats(), want_do, tol, "scaled gather");
  check_close(y.to_floats(), want_y, tol, "combine");
  check_close(dx.to_floats(), want_dx, tol, "unweighted combine");
  check_close(dweight.to_floats(), want_dw, tol * std::sqrt(dd), "combine weight grad");
  const std::vector<float> dl32 = dlogits_f32.to_floats();
  check_close(dlogits.to_floats(), std::vector<double>(dl32.begin(), dl32.end()), tol, "dlogits cast");

  // The profile's bandwidth as calibrate_this_machine measures it, one timed op among the others.
  const Tensor bx = host(Shape{1 << 21}, DType::kF32), by = host(Shape{1 << 21}, DType::kF32);
  ops::fill(ctx, bx, 1.0f);
  ops::fill(ctx, by, 0.0f);
  Op axpy{"axpy (the profile's bandwidth)", "-", 3.0 * 4.0 * (1 << 21), [&] { ops::axpy(ctx, 0.5f, bx, by); }, {}};

  // Interleaved rounds: each op run `reps` times back to back (reps for ~2 ms a round), per-call time.
  const auto time_once = [](Op& op, int reps) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) op.run();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
  };
  std::vector<Op*> all;
  for (Op& op : ops_list) all.push_back(&op);
  all.push_back(&axpy);
  std::vector<int> reps;
  for (Op* op : all) {
    op->run();  // warm-up
    reps.push_back(std::max(1, static_cast<int>(2e-3 / std::max(1e-7, time_once(*op, 1)))));
  }
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t i = 0; i < all.size(); ++i) all[i]->seconds.push_back(time_once(*all[i], reps[i]));
  }
  const double bandwidth = axpy.bytes / median(axpy.seconds);
  std::printf("N %lld D %lld E %lld k %lld %s, %d threads, %d rounds; bandwidth (axpy, 8 MiB f32) %.1f GB/s\n",
              static_cast<long long>(n), static_cast<long long>(d), static_cast<long long>(e),
              static_cast<long long>(k), precision.c_str(), threads, rounds, bandwidth / 1e9);
  std::printf("| op | pass | bytes | measured us | predicted us | measured / predicted |\n");
  std::printf("|---|---|---:|---:|---:|---:|\n");
  // Per round: measured / (bytes / that round's bandwidth), for each op and for each pass's ops together.
  const auto round_ratio = [&](double seconds, double bytes, int round) {
    return seconds / (bytes * axpy.seconds[static_cast<std::size_t>(round)] / axpy.bytes);
  };
  double measured_total[2] = {0, 0}, predicted_total[2] = {0, 0};
  std::vector<double> pass_ratios[2];
  for (int pass = 0; pass < 2; ++pass) {
    for (int round = 0; round < rounds; ++round) {
      double sum = 0;
      for (const Op& op : ops_list) {
        if ((op.pass[0] == 'F') == (pass == 0)) sum += op.seconds[static_cast<std::size_t>(round)];
      }
      pass_ratios[pass].push_back(round_ratio(sum, pass == 0 ? f_bytes : i_bytes, round));
    }
  }
  for (const Op& op : ops_list) {
    const double m = median(op.seconds), p = op.bytes / bandwidth;
    const int pass = op.pass[0] == 'F' ? 0 : 1;
    measured_total[pass] += m;
    predicted_total[pass] += p;
    std::vector<double> ratios;
    for (int round = 0; round < rounds; ++round) {
      ratios.push_back(round_ratio(op.seconds[static_cast<std::size_t>(round)], op.bytes, round));
    }
    std::printf("| %s | %s | %.0f | %.1f | %.1f | %.2f |\n", op.name, op.pass, op.bytes, m * 1e6, p * 1e6,
                median(ratios));
  }
  for (int pass = 0; pass < 2; ++pass) {
    std::printf("| all of %s | %s | %.0f | %.1f | %.1f | %.2f |\n", pass == 0 ? "F" : "I", pass == 0 ? "F" : "I",
                pass == 0 ? f_bytes : i_bytes, measured_total[pass] * 1e6, predicted_total[pass] * 1e6,
                median(pass_ratios[pass]));
  }
  return 0;
}

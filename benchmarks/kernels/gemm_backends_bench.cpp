// The CPU GEMM libraries side by side (device.blas: openblas, blis, onednn) on the training shapes: the forward,
// input-gradient and weight-gradient GEMMs of every Linear of the example and peer GPTs and of GPT-2 124M's
// block, through the op seam exactly as a training step calls them (ops::gemm: bias epilogue on the forward,
// f32 weight gradients accumulated with beta = 1, bf16 activations under bf16 precision), in f32 and bf16,
// at 1 and 2 threads (ops::configure_cpu_threads).
//
// What it asserts before timing: each library's C matches a double-precision reference on 48 sampled entries
// (error within 1e-4 of the sum of |products|, plus one bf16 rounding for a bf16 C), or it exits 1 untimed.
// What it reports: per shape, dtype and thread count, each library's GFLOP/s (2*m*n*k / time) as the median of
// 7 samples taken in turn (library A, B, C, A, B, C, ...: a drift of the shared machine hits all alike), after a
// warm-up; a sample repeats the GEMM until it lasts at least 20 ms. Markdown rows on stdout, with the CPU model
// and the libraries' own descriptions first.
// --inner: instead of the Linears, the f32 GEMMs that stay on OpenBLAS whatever device.blas says (flash
// attention's block GEMMs, one call on one thread; conv2d's per-image im2col GEMMs), with dense operands, through
// the same op seam, so each library's time is what that GEMM would cost if it ran there.
//   gemm_backends_bench [--quick] [--inner] [--filter SUBSTRING]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/gemm_backend.hpp"
#include "kernels/ops/ops.hpp"

namespace {

using namespace cleave;
namespace kc = cleave::kernels::cpu;

struct LinearShape {
  std::string model;
  std::string layer;
  std::int64_t rows, in, out;
};

// rows = micro-batch x seq_len tokens.
std::vector<LinearShape> linears(bool quick) {
  std::vector<LinearShape> all;
  auto block = [&](const std::string& model, std::int64_t rows, std::int64_t d, std::int64_t ff) {
    all.push_back({model, "qkv", rows, d, 3 * d});
    all.push_back({model, "attn_proj", rows, d, d});
    all.push_back({model, "mlp_fc", rows, d, ff});
    all.push_back({model, "mlp_proj", rows, ff, d});
  };
  block("gpt_fortunes d128 T64 mb8", 512, 128, 512);
  all.push_back({"gpt_fortunes d128 T64 mb8", "lm_head", 512, 128, 256});
  block("peer small d256 T64 b16", 1024, 256, 1024);
  if (!quick) {
    block("peer large d512 T128 b8", 1024, 512, 2048);
    block("peer large d512 T128 b16", 2048, 512, 2048);  // benchmarks/peers/cpu_train_bench.py's micro-batch
    block("gpt2-124M T1024 b1", 1024, 768, 3072);
    block("gpt2-124M T1024 b4", 4096, 768, 3072);
  }
  return all;
}

// A GEMM given by its own m, n, k and flags (the inner GEMMs): C[m,n] = op(A) op(B) + beta C, f32.
struct InnerGemm {
  std::string model, layer, pass;
  std::int64_t m, n, k;
  bool trans_a, trans_b;
  float beta;
  std::vector<int> threads;
};

// Flash attention's block GEMMs (kernels/cpu/flash_attention*.cpp, kFlashBlockQ 64 query rows x a key block of
// min(T, 128) columns; always one call on the calling thread): scores S = Q K^T (dP = dO V^T alike), acc += S V
// (dQ += dS K alike), dV += P^T dO (dK += dS^T Q alike). hd 32 at T 64: the example and small peer GPT; hd 64 at
// T >= 128: the larger peer GPT and GPT-2. Then conv2d's per-image GEMMs (kernels/cpu/conv2d.cpp: y = W col,
// col = W^T dy, dW += dy col^T) of examples/cnn_digits.json (8x8 digits, channels 16 and 32, kernel 3, pool 2)
// and of a mid-sized layer (64 -> 64 channels, 32x32, kernel 3), sliced over the team like any gemm().
std::vector<InnerGemm> inner_gemms() {
  std::vector<InnerGemm> all;
  for (const auto& [model, hd, cols] : {std::tuple<const char*, std::int64_t, std::int64_t>{"attention hd32 T64", 32, 64},
                                        {"attention hd64 T>=128", 64, 128}}) {
    all.push_back({model, "block", "S=QK^T", 64, cols, hd, false, false, 0.0f, {1}});
    all.push_back({model, "block", "acc+=SV", 64, hd, cols, false, false, 1.0f, {1}});
    all.push_back({model, "block", "dV+=P^TdO", cols, hd, 64, true, false, 1.0f, {1}});
  }
  auto conv = [&](const std::string& model, const std::string& layer, std::int64_t c_in, std::int64_t c_out,
                  std::int64_t spatial) {
    const std::int64_t ckk = c_in * 9;
    all.push_back({model, layer, "fwd", c_out, spatial, ckk, false, false, 0.0f, {1, 2}});
    all.push_back({model, layer, "dgrad", ckk, spatial, c_out, true, false, 0.0f, {1, 2}});
    all.push_back({model, layer, "wgrad", c_out, ckk, spatial, false, true, 1.0f, {1, 2}});
  };
  conv("cnn_digits", "conv1 1->16 8x8", 1, 16, 64);
  conv("cnn_digits", "conv2 16->32 4x4", 16, 32, 16);
  conv("conv 64->64 32x32", "conv", 64, 64, 1024);
  return all;
}

enum class Pass { kForward, kInputGrad, kWeightGrad };
const char* pass_name(Pass p) { return p == Pass::kForward ? "fwd" : p == Pass::kInputGrad ? "dgrad" : "wgrad"; }

struct Problem {
  Tensor a, b, c, bias;
  ops::GemmOptions options;
  std::int64_t m, n, k;
};

Tensor random_tensor(const Shape& shape, DType dtype, std::uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (float& x : v) x = dist(rng);
  Tensor f = Tensor::from_floats(v, shape);
  if (dtype == DType::kF32) return f;
  Tensor out = Tensor::empty(shape, dtype, MemoryCategory::kActivations, cpu_allocator());
  ops::copy(ops::Context{}, f, out);
  return out;
}

// The GEMM a Linear(in -> out) over `rows` tokens makes in `pass` (layers/linear.cpp): y = x W^T + b,
// dx = dy W, dW += dy^T x (dW f32: gradients stay f32 under bf16 precision).
Problem make_problem(const LinearShape& s, Pass pass, DType dtype) {
  Problem p;
  const Tensor w = random_tensor({s.out, s.in}, dtype, 1, 0.05f);
  if (pass == Pass::kForward) {
    p.a = random_tensor({s.rows, s.in}, dtype, 2);
    p.b = w;
    p.c = Tensor::empty({s.rows, s.out}, dtype, MemoryCategory::kActivations, cpu_allocator());
    p.bias = random_tensor({s.out}, dtype, 3);
    p.options.trans_b = true;
    p.options.epilogue = ops::GemmEpilogue::kBias;
    p.options.bias = p.bias;
    p.m = s.rows, p.n = s.out, p.k = s.in;
  } else if (pass == Pass::kInputGrad) {
    p.a = random_tensor({s.rows, s.out}, dtype, 4);
    p.b = w;
    p.c = Tensor::empty({s.rows, s.in}, dtype, MemoryCategory::kActivations, cpu_allocator());
    p.m = s.rows, p.n = s.in, p.k = s.out;
  } else {
    p.a = random_tensor({s.rows, s.out}, dtype, 5);
    p.b = random_tensor({s.rows, s.in}, dtype, 6);
    p.c = random_tensor({s.out, s.in}, DType::kF32, 7);
    p.options.trans_a = true;
    p.options.beta = 1.0f;
    p.m = s.out, p.n = s.in, p.k = s.rows;
  }
  return p;
}

Problem make_inner_problem(const InnerGemm& g) {
  Problem p;
  p.a = g.trans_a ? random_tensor({g.k, g.m}, DType::kF32, 11) : random_tensor({g.m, g.k}, DType::kF32, 11);
  p.b = g.trans_b ? random_tensor({g.n, g.k}, DType::kF32, 12) : random_tensor({g.k, g.n}, DType::kF32, 12);
  p.c = random_tensor({g.m, g.n}, DType::kF32, 13);
  p.options.trans_a = g.trans_a;
  p.options.trans_b = g.trans_b;
  p.options.beta = g.beta;
  p.m = g.m, p.n = g.n, p.k = g.k;
  return p;
}

// 48 sampled entries of C after one GEMM against a double reference on the same (rounded) operands.
bool check(const ops::Context& ctx, Problem& p, const std::string& what) {
  const std::vector<float> a = p.a.to_floats(), b = p.b.to_floats(), c_in = p.c.to_floats();
  const std::vector<float> bias = p.bias.defined() ? p.bias.to_floats() : std::vector<float>();
  ops::gemm(ctx, p.a, p.b, p.c, p.options);
  const std::vector<float> c = p.c.to_floats();
  const std::int64_t lda = p.a.shape().last(), ldb = p.b.shape().last();
  std::mt19937_64 rng(99);
  double norm = 0.0;
  for (int s = 0; s < 48; ++s) {
    const std::int64_t i = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(p.m));
    const std::int64_t j = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(p.n));
    double acc = 0.0, mag = 0.0;
    for (std::int64_t q = 0; q < p.k; ++q) {
      const double av = p.options.trans_a ? a[static_cast<size_t>(q * lda + i)] : a[static_cast<size_t>(i * lda + q)];
      const double bv = p.options.trans_b ? b[static_cast<size_t>(j * ldb + q)] : b[static_cast<size_t>(q * ldb + j)];
      acc += av * bv;
      mag += std::fabs(av * bv);
    }
    const size_t e = static_cast<size_t>(i * p.n + j);
    if (p.options.beta != 0.0f) acc += p.options.beta * c_in[e], mag += std::fabs(c_in[e]);
    if (!bias.empty()) acc += bias[static_cast<size_t>(j)], mag += std::fabs(bias[static_cast<size_t>(j)]);
    const double tol = 1e-4 * mag + (p.c.dtype() == DType::kBF16 ? std::fabs(acc) / 128.0 : 0.0);
    norm += std::fabs(c[e]);
    if (!(std::fabs(c[e] - acc) <= tol)) {
      std::fprintf(stderr, "%s: C[%lld,%lld] = %g, reference %g (tolerance %g)\n", what.c_str(),
                   static_cast<long long>(i), static_cast<long long>(j), c[e], acc, tol);
      return false;
    }
  }
  if (norm == 0.0) std::fprintf(stderr, "%s: all sampled entries are zero\n", what.c_str());
  return norm > 0.0;
}

double seconds_per_gemm(const ops::Context& ctx, Problem& p, int calls) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) ops::gemm(ctx, p.a, p.b, p.c, p.options);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model, family, number;
  while (std::getline(in, line)) {
    auto value = [&] { return line.substr(line.find(':') + 2); };
    if (model.empty() && line.rfind("model name", 0) == 0) model = value();
    if (family.empty() && line.rfind("cpu family", 0) == 0) family = value();
    if (number.empty() && line.rfind("model\t", 0) == 0) number = value();
  }
  return model + " (family " + family + ", model " + number + ")";
}

// One row: every library checked against the reference on a fresh problem, warmed up, then 7 samples each in
// turn; prints the row's GFLOP/s. Returns false (nothing printed) when a library's result is wrong.
template <typename MakeProblem>
bool time_row(const std::vector<ops::CpuBlas>& libraries, ops::DeviceResources* resources, const std::string& row,
              const std::string& what, MakeProblem make, int threads) {
  ops::configure_cpu_threads(threads);
  Problem p = make();
  const double flops = 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
  std::vector<ops::Context> contexts(libraries.size());
  std::vector<int> calls(libraries.size());
  for (size_t l = 0; l < libraries.size(); ++l) {
    contexts[l].cpu_blas = libraries[l];
    contexts[l].resources = resources;
    Problem fresh = make();
    if (!check(contexts[l], fresh, what + " " + std::string(enum_name(libraries[l])))) return false;
    const double once = seconds_per_gemm(contexts[l], p, 1);  // warm-up (primitive creation, caches)
    calls[l] = std::max(1, static_cast<int>(0.02 / std::max(once, 1e-7)));
    seconds_per_gemm(contexts[l], p, calls[l]);
  }
  std::vector<std::vector<double>> samples(libraries.size());
  for (int r = 0; r < 7; ++r) {
    for (size_t l = 0; l < libraries.size(); ++l) samples[l].push_back(seconds_per_gemm(contexts[l], p, calls[l]));
  }
  std::printf("| %s | %lldx%lldx%lld | %s | %d |", row.c_str(), static_cast<long long>(p.m),
              static_cast<long long>(p.n), static_cast<long long>(p.k), dtype_name(p.a.dtype()).data(), threads);
  double best = 0.0;
  size_t best_l = 0;
  for (size_t l = 0; l < libraries.size(); ++l) {
    std::sort(samples[l].begin(), samples[l].end());
    const double gflops = flops / samples[l][3] * 1e-9;
    if (gflops > best) best = gflops, best_l = l;
    std::printf(" %.1f |", gflops);
  }
  std::printf(" %s |\n", enum_name(libraries[best_l]).data());
  std::fflush(stdout);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, inner = false;
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") quick = true;
    else if (arg == "--inner") inner = true;
    else if (arg == "--filter" && i + 1 < argc) filter = argv[++i];
    else {
      std::fprintf(stderr, "usage: gemm_backends_bench [--quick] [--inner] [--filter SUBSTRING]\n");
      return 2;
    }
  }
  std::vector<ops::CpuBlas> libraries;
  for (const ops::CpuBlas b : {ops::CpuBlas::kOpenBlas, ops::CpuBlas::kBlis, ops::CpuBlas::kOneDnn}) {
    if (ops::cpu_blas_built(b)) libraries.push_back(b);
  }
  // The run state a training run's contexts carry (oneDNN's primitives and scratchpads), one for all contexts.
  const std::unique_ptr<ops::DeviceResources> resources = ops::make_device_resources(Device::cpu());
  std::printf("CPU: %s\n", cpu_model().c_str());
  for (const kc::GemmBackend g : {kc::GemmBackend::kOpenBlas, kc::GemmBackend::kBlis, kc::GemmBackend::kOneDnn}) {
    std::printf("%s: %s\n", kc::gemm_backend_name(g), kc::gemm_backend_description(g).c_str());
  }
  std::printf("\nGFLOP/s, median of 7 interleaved samples; bf16 = bf16 operands (openblas and blis widen them to "
              "f32 first, onednn runs bf16 kernels), f32 accumulation.\n\n");
  std::printf("| model | layer | pass | m x n x k | dtype | threads |");
  for (const ops::CpuBlas b : libraries) std::printf(" %s |", enum_name(b).data());
  std::printf(" best |\n|---|---|---|---|---|---|");
  for (size_t i = 0; i < libraries.size(); ++i) std::printf("---|");
  std::printf("---|\n");

  if (inner) {
    for (const InnerGemm& g : inner_gemms()) {
      if (!filter.empty() && (g.model + " " + g.layer).find(filter) == std::string::npos) continue;
      const std::string row = g.model + " | " + g.layer + " | " + g.pass;
      for (const int threads : g.threads) {
        if (!time_row(libraries, resources.get(), row, g.model + " " + g.layer + " " + g.pass,
                      [&] { return make_inner_problem(g); }, threads)) {
          return 1;
        }
      }
    }
    return 0;
  }
  for (const LinearShape& s : linears(quick)) {
    if (!filter.empty() && (s.model + " " + s.layer).find(filter) == std::string::npos) continue;
    for (const Pass pass : {Pass::kForward, Pass::kInputGrad, Pass::kWeightGrad}) {
      for (const DType dtype : {DType::kF32, DType::kBF16}) {
        const std::string row = s.model + " | " + s.layer + " | " + pass_name(pass);
        const std::string what = s.model + " " + s.layer + " " + pass_name(pass) + " " + std::string(dtype_name(dtype));
        for (const int threads : {1, 2}) {
          if (!time_row(libraries, resources.get(), row, what, [&] { return make_problem(s, pass, dtype); }, threads)) {
            return 1;
          }
        }
      }
    }
  }
  return 0;
}

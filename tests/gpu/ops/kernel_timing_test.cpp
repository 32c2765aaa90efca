// Kernel timings for a lent GPU (label gpu, binary gpu_ops_test; compiled, not run on a GPU yet). DISABLED_, so the
// parity run (the ops-parity stage, ctest) leaves them out; scripts/gpu-check.sh's kernel-timing stage runs them with
// --gtest_also_run_disabled_tests --gtest_filter='KernelTiming.*'. Each validates before it times (inputs drawn
// fresh, nothing timed on zeros), then times with device events after a warm-up and reports medians:
//  - DISABLED_ExactNormAgainstRoundedSum: the gradient norm's sum of squares over GPT-2 small's 148 gradient
//    tensors (124,439,808 f32), the exact fixed-point kernel (ops::sum_squares_exact; 1 launch per tensor) against
//    the rounded double sum it replaced (ops::sum_squares_many; 2 per tensor + 1). Checked first: the exact digits
//    are the CPU backend's, the rounded sum is within 1e-9 of the CPU's and of the exact one. Timed: the device
//    work alone (events around the launches) and the op as the trainer calls it (host clock, one read-back and
//    wait included), interleaved rounds; the ceiling is a 1 GiB device-to-device copy (bytes read + written).
//  - DISABLED_FusedAddRmsNormAgainstThePair: add_rmsnorm_forward against add + rmsnorm_forward, and
//    add_rmsnorm_backward_input against rmsnorm_backward_input + add_inplace, at GPT-2 small's width and Llama-2
//    7B's ([8192, 768] and [8192, 4096]: 8 sequences of 1024 tokens), f32 and bf16. Checked first: the fused
//    outputs are the pair's bit for bit. Bytes each variant must move (elements of the [rows, cols] operands): fused
//    forward 4 (x, y read; r, out written), pair 5 (r read again); fused backward 4 (dy, x, dres read; dx written),
//    pair 6 (dx written, read and written again), so the predicted pair/fused time ratios are 1.25 and 1.5.
//  - DISABLED_MoeCombineWeightGrad: the mixture-of-experts routing weights' gradient (kd::moe_combine_weight_grad:
//    one warp per 32 outputs, coalesced rows, each output's products added in column order) at 8192 tokens, top-2
//    of width 768 and top-8 of width 4096, f32 and bf16. Checked first: the CPU backend's bits. Bytes it must move:
//    dy [tokens, d] and the routed rows [tokens x k, d] read once (indices and output ignored).
// Output: a table in the log, one line per test starting "kernel-timing: " (the stage's summary), and, when
// CLEAVE_KERNEL_TIMING_OUT names a file, one JSON object per measurement appended to it (JSON Lines).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "engine/cuda/stream.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/moe.hpp"
#include "kernels/cuda/rmsnorm.hpp"
#include "kernels/cuda/sum_squares_exact.hpp"
#include "kernels/cuda/sum_squares_many.hpp"
#include "kernels/exact_square_sum.hpp"
#include "tests/gpu/ops/parity_util.hpp"

namespace cleave::testing::kernel_timing_test {
namespace {

namespace kd = kernels::cuda;
using kernels::ExactSquareSum;

// GPT-2 small's parameters as gradient tensors: token and position tables, 12 blocks of (ln_1, attention qkv and
// projection, ln_2, MLP up and down; weights and biases), the final norm.
std::vector<std::int64_t> gpt2_small_gradient_sizes() {
  constexpr std::int64_t d = 768, vocab = 50257, positions = 1024, layers = 12;
  std::vector<std::int64_t> sizes = {vocab * d, positions * d};
  for (std::int64_t l = 0; l < layers; ++l) {
    for (std::int64_t n : {d, d, d * 3 * d, 3 * d, d * d, d, d, d, d * 4 * d, 4 * d, 4 * d * d, d}) sizes.push_back(n);
  }
  sizes.push_back(d);
  sizes.push_back(d);
  return sizes;
}

// n values with about a normal distribution (a sum of four uniforms) of standard deviation `scale`: the spread of
// exponents a gradient has. splitmix64: fast enough to draw 10^8 values in a second on the host.
std::vector<float> gradient_like(std::int64_t n, std::uint64_t seed, float scale) {
  std::vector<float> v(static_cast<std::size_t>(n));
  std::uint64_t s = seed;
  auto next = [&s] {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  const float unit = 1.0f / 16777216.0f;
  for (float& x : v) {
    const std::uint64_t a = next(), b = next();
    const float u = static_cast<float>(a & 0xffffff) * unit + static_cast<float>((a >> 32) & 0xffffff) * unit +
                    static_cast<float>(b & 0xffffff) * unit + static_cast<float>((b >> 32) & 0xffffff) * unit;
    x = (u - 2.0f) * 1.7320508f * scale;  // variance of a sum of 4 uniforms: 1/3
  }
  return v;
}

void report_json(const std::string& object) {
  std::printf("%s\n", object.c_str());
  const char* path = std::getenv("CLEAVE_KERNEL_TIMING_OUT");
  if (path == nullptr || *path == '\0') return;
  if (std::FILE* f = std::fopen(path, "a")) {
    std::fprintf(f, "%s\n", object.c_str());
    std::fclose(f);
  } else {
    ADD_FAILURE() << "CLEAVE_KERNEL_TIMING_OUT=" << path << " cannot be opened for appending";
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// A JSON number (null for a value JSON has no number for: a rate over a zero time, say).
std::string fmt_double(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

class KernelTiming : public OpsParity {
 protected:
  cudaStream_t native() const { return cuda::native_stream(*gpu().stream); }

  // Milliseconds of one call of `launch` (which enqueues work on the run's stream): the median over `rounds` of
  // `per_round` calls between two events, after `warmup` calls.
  double device_ms(const std::function<void()>& launch, int warmup = 3, int rounds = 7, int per_round = 10) {
    for (int i = 0; i < warmup; ++i) launch();
    cuda::CudaEvent start(0, /*timing=*/true), stop(0, /*timing=*/true);
    std::vector<double> per_call;
    for (int r = 0; r < rounds; ++r) {
      start.record(*gpu().stream);
      for (int i = 0; i < per_round; ++i) launch();
      stop.record(*gpu().stream);
      per_call.push_back(cuda::CudaEvent::elapsed_ms(start, stop) / per_round);
    }
    return median(per_call);
  }

  Tensor device_values(const Shape& shape, DType dtype, std::uint64_t seed, float scale, float offset = 0.0f) {
    std::vector<float> v = gradient_like(shape.numel(), seed, scale);
    if (offset != 0.0f) {
      for (float& x : v) x += offset;
    }
    return to_gpu(from_floats(v, shape, dtype));
  }
  Tensor device_empty(const Shape& shape, DType dtype) {
    return Tensor::empty(shape, dtype, MemoryCategory::kActivations, *gpu().allocator);
  }
};

kd::ConstFloats in(const Tensor& t) {
  return kd::ConstFloats(t.raw_data(), t.dtype() == DType::kBF16 ? kd::FloatType::kBF16 : kd::FloatType::kF32);
}
kd::Floats out(const Tensor& t) {
  return kd::Floats(t.raw_data(), t.dtype() == DType::kBF16 ? kd::FloatType::kBF16 : kd::FloatType::kF32);
}

// Elements of a and b (same dtype and size, on the host) whose bytes differ.
std::int64_t differing(const Tensor& a, const Tensor& b) {
  const std::size_t size = dtype_size(a.dtype());
  const auto* pa = static_cast<const unsigned char*>(a.raw_data());
  const auto* pb = static_cast<const unsigned char*>(b.raw_data());
  std::int64_t n = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) n += std::memcmp(pa + i * size, pb + i * size, size) != 0;
  return n;
}

TEST_F(KernelTiming, DISABLED_ExactNormAgainstRoundedSum) {
  const std::vector<std::int64_t> sizes = gpt2_small_gradient_sizes();
  std::int64_t total = 0;
  for (std::int64_t n : sizes) total += n;
  ASSERT_EQ(sizes.size(), 148u);
  ASSERT_EQ(total, 124439808);  // GPT-2 small with its position table (the tied head counted once)

  std::vector<Tensor> host, grads;
  std::vector<const float*> pointers;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const float scale = std::ldexp(1.0f, -6 - static_cast<int>(i % 8));  // tensors of different scales
    host.push_back(from_floats(gradient_like(sizes[i], seed_ + 1000 * i, scale), Shape{sizes[i]}, DType::kF32));
    grads.push_back(to_gpu(host.back()));
    pointers.push_back(grads.back().data<float>());
  }

  // Correct first.
  const ExactSquareSum cpu_exact = ops::sum_squares_exact(cpu(), host);
  const ExactSquareSum gpu_exact = ops::sum_squares_exact(gpu(), grads);
  const double cpu_rounded = ops::sum_squares_many(cpu(), host);
  const double gpu_rounded = ops::sum_squares_many(gpu(), grads);
  const double exact = cpu_exact.to_double();
  ASSERT_TRUE(std::isfinite(exact) && exact > 0.0);
  const bool digits_equal = gpu_exact == cpu_exact;
  EXPECT_TRUE(digits_equal) << "the GPU's exact digits differ from the CPU's: gpu " << gpu_exact.to_double()
                            << " cpu " << exact;
  // The rounded sums add 10^8 positive doubles in different orders: about sqrt(n) eps apart (1e-12), far below 1e-9.
  EXPECT_LE(std::fabs(gpu_rounded - cpu_rounded), 1e-9 * cpu_rounded) << gpu_rounded << " vs " << cpu_rounded;
  EXPECT_LE(std::fabs(gpu_rounded - exact), 1e-9 * exact) << gpu_rounded << " vs exact " << exact;

  // The device work alone: what each op enqueues (the exact op zeroes its accumulator first).
  Tensor acc = device_empty(Shape{static_cast<std::int64_t>((sizeof(ExactSquareSum) + 3) / 4)}, DType::kF32);
  const std::size_t ws_bytes = kd::sum_squares_many_workspace_size(sizes.data(), static_cast<int>(sizes.size()));
  Tensor ws = device_empty(Shape{static_cast<std::int64_t>((ws_bytes + 3) / 4)}, DType::kF32);
  Tensor sum = device_empty(Shape{2}, DType::kF32);
  auto* acc_ptr = static_cast<ExactSquareSum*>(acc.raw_data());
  const auto launch_exact = [&] {
    ASSERT_EQ(cudaMemsetAsync(acc_ptr, 0, sizeof(ExactSquareSum), native()), cudaSuccess);
    for (std::size_t i = 0; i < sizes.size(); ++i) kd::sum_squares_exact(pointers[i], sizes[i], acc_ptr, native());
  };
  const auto launch_rounded = [&] {
    kd::sum_squares_many(pointers.data(), sizes.data(), static_cast<int>(sizes.size()),
                         static_cast<double*>(sum.raw_data()), ws.raw_data(), ws_bytes, native());
  };
  // The op as the trainer calls it: host clock around the call (launches, one read-back, one wait).
  const auto host_ms = [](const std::function<void()>& call) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  std::vector<double> exact_dev, rounded_dev, exact_op, rounded_op;
  for (int round = 0; round < 5; ++round) {  // interleaved, so drift in clocks or temperature hits both alike
    exact_dev.push_back(device_ms(launch_exact, round == 0 ? 2 : 0, 1, 4));
    rounded_dev.push_back(device_ms(launch_rounded, round == 0 ? 2 : 0, 1, 4));
    for (int i = 0; i < 2; ++i) {
      exact_op.push_back(host_ms([&] { (void)ops::sum_squares_exact(gpu(), grads); }));
      rounded_op.push_back(host_ms([&] { (void)ops::sum_squares_many(gpu(), grads); }));
    }
  }
  // The memory ceiling: a 1 GiB device-to-device copy, bytes read plus written.
  const std::int64_t copy_floats = std::int64_t{1} << 28;
  Tensor src = device_empty(Shape{copy_floats}, DType::kF32), dst = device_empty(Shape{copy_floats}, DType::kF32);
  ASSERT_EQ(cudaMemsetAsync(src.raw_data(), 0x3c, static_cast<std::size_t>(copy_floats) * 4, native()), cudaSuccess);
  const double copy_ms = device_ms([&] {
    ASSERT_EQ(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), static_cast<std::size_t>(copy_floats) * 4,
                              cudaMemcpyDeviceToDevice, native()),
              cudaSuccess);
  }, 1, 5, 2);
  const double copy_gbps = 2.0 * 4.0 * static_cast<double>(copy_floats) / (copy_ms * 1e6);
  const double bytes = 4.0 * static_cast<double>(total);
  const double e_dev = median(exact_dev), r_dev = median(rounded_dev), e_op = median(exact_op),
               r_op = median(rounded_op);
  std::printf("[ timing ] gradient norm, GPT-2 small (%lld f32 in %zu tensors, %.1f MB); copy ceiling %.0f GB/s, "
              "floor %.3f ms\n", static_cast<long long>(total), sizes.size(), bytes / 1e6, copy_gbps,
              bytes / (copy_gbps * 1e6));
  std::printf("[ timing ]   %-34s %10s %10s %12s\n", "variant", "device ms", "GB/s", "op ms (+wait)");
  std::printf("[ timing ]   %-34s %10.3f %10.0f %12.3f\n", "exact (sum_squares_exact)", e_dev, bytes / (e_dev * 1e6),
              e_op);
  std::printf("[ timing ]   %-34s %10.3f %10.0f %12.3f\n", "rounded (sum_squares_many)", r_dev,
              bytes / (r_dev * 1e6), r_op);
  for (const auto& [name, dev, op] : {std::tuple{"exact", e_dev, e_op}, std::tuple{"rounded", r_dev, r_op}}) {
    report_json(std::string("{\"measurement\":\"gradient_norm\",\"model\":\"gpt2_small\",\"elements\":") +
                std::to_string(total) + ",\"tensors\":" + std::to_string(sizes.size()) + ",\"variant\":\"" + name +
                "\",\"device_ms\":" + fmt_double(dev) + ",\"gbps\":" + fmt_double(bytes / (dev * 1e6)) +
                ",\"op_ms_with_readback\":" + fmt_double(op) + ",\"copy_ceiling_gbps\":" + fmt_double(copy_gbps) +
                ",\"validated\":" + (digits_equal ? "true" : "false") + "}");
  }
  // The summary row's share (the row is cut at 240 characters): exact and rounded device ms, their ratio, the
  // ops with their read-back, the copy ceiling.
  std::printf("kernel-timing: norm 124M f32 exact %.3g ms, rounded %.3g ms (%.3gx), ops %.3g/%.3g ms, copy %.0f "
              "GB/s%s\n", e_dev, r_dev, e_dev / r_dev, e_op, r_op, copy_gbps,
              digits_equal ? "" : " DIGITS DIFFER FROM THE CPU");
  EXPECT_GT(e_dev, 0.0);
  EXPECT_GT(r_dev, 0.0);
}

TEST_F(KernelTiming, DISABLED_FusedAddRmsNormAgainstThePair) {
  constexpr float kEps = 1e-5f;
  struct Case {
    std::int64_t rows, cols;
    DType dtype;
  };
  const Case cases[] = {{8192, 768, DType::kF32}, {8192, 768, DType::kBF16}, {8192, 4096, DType::kF32},
                        {8192, 4096, DType::kBF16}};
  std::string headline;
  for (const Case& c : cases) {
    const Shape shape{c.rows, c.cols};
    const std::string what = shape.str() + " " + std::string(dtype_name(c.dtype));
    const std::uint64_t s = seed_ + static_cast<std::uint64_t>(c.rows * 7 + c.cols * 13) + (c.dtype == DType::kBF16);
    const Tensor x = device_values(shape, c.dtype, s + 1, 1.0f), y = device_values(shape, c.dtype, s + 2, 1.0f);
    const Tensor w = device_values(Shape{c.cols}, c.dtype, s + 3, 0.2f, 1.0f);
    const Tensor dy = device_values(shape, c.dtype, s + 4, 1e-3f), dres = device_values(shape, c.dtype, s + 5, 1e-3f);
    Tensor r_fused = device_empty(shape, c.dtype), out_fused = device_empty(shape, c.dtype);
    Tensor r_pair = device_empty(shape, c.dtype), out_pair = device_empty(shape, c.dtype);
    Tensor rstd_fused = device_empty(Shape{c.rows}, DType::kF32), rstd_pair = device_empty(Shape{c.rows}, DType::kF32);
    Tensor dx_fused = device_empty(shape, c.dtype), dx_pair = device_empty(shape, c.dtype);
    const std::int64_t n = shape.numel();

    const auto fused_forward = [&] {
      kd::add_rmsnorm_forward(in(x), in(y), in(w), out(r_fused), out(out_fused), rstd_fused.data<float>(), c.rows,
                              c.cols, kEps, native());
    };
    const auto pair_forward = [&] {
      kd::add(in(x), in(y), out(r_pair), n, native());
      kd::rmsnorm_forward(in(r_pair), in(w), out(out_pair), rstd_pair.data<float>(), c.rows, c.cols, kEps, native());
    };
    const auto fused_backward = [&] {
      kd::add_rmsnorm_backward_input(in(dy), in(dres), in(r_fused), in(w), rstd_fused.data<float>(), out(dx_fused),
                                     c.rows, c.cols, native());
    };
    const auto pair_backward = [&] {
      kd::rmsnorm_backward_input(in(dy), in(r_pair), in(w), rstd_pair.data<float>(), out(dx_pair), c.rows, c.cols,
                                 native());
      kd::add_inplace(out(dx_pair), in(dres), n, native());
    };

    // Correct first: the fused outputs are the pair's, bit for bit.
    fused_forward();
    pair_forward();
    fused_backward();
    pair_backward();
    const std::int64_t bad_r = differing(to_cpu(r_fused), to_cpu(r_pair));
    const std::int64_t bad_out = differing(to_cpu(out_fused), to_cpu(out_pair));
    const std::int64_t bad_rstd = differing(to_cpu(rstd_fused), to_cpu(rstd_pair));
    const std::int64_t bad_dx = differing(to_cpu(dx_fused), to_cpu(dx_pair));
    EXPECT_EQ(bad_r + bad_out + bad_rstd + bad_dx, 0)
        << what << ": fused vs pair differ in r " << bad_r << ", out " << bad_out << ", rstd " << bad_rstd << ", dx "
        << bad_dx << " elements";
    const bool same = bad_r + bad_out + bad_rstd + bad_dx == 0;

    const double ff = device_ms(fused_forward), pf = device_ms(pair_forward);
    const double fb = device_ms(fused_backward), pb = device_ms(pair_backward);
    const double elem = static_cast<double>(n) * static_cast<double>(dtype_size(c.dtype));
    std::printf("[ timing ] add+RMSNorm %-18s fwd fused %.4f ms (%.0f GB/s) pair %.4f ms (%.0f GB/s) = %.2fx; "
                "bwd fused %.4f ms (%.0f GB/s) pair %.4f ms (%.0f GB/s) = %.2fx%s\n",
                what.c_str(), ff, 4 * elem / (ff * 1e6), pf, 5 * elem / (pf * 1e6), pf / ff, fb, 4 * elem / (fb * 1e6),
                pb, 6 * elem / (pb * 1e6), pb / fb, same ? "" : " (NOT bit-identical)");
    for (const auto& [pass, variant, ms, elements] :
         {std::tuple{"forward", "fused", ff, 4}, std::tuple{"forward", "pair", pf, 5},
          std::tuple{"backward", "fused", fb, 4}, std::tuple{"backward", "pair", pb, 6}}) {
      report_json(std::string("{\"measurement\":\"add_rmsnorm\",\"rows\":") + std::to_string(c.rows) +
                  ",\"cols\":" + std::to_string(c.cols) + ",\"dtype\":\"" + std::string(dtype_name(c.dtype)) +
                  "\",\"pass\":\"" + pass + "\",\"variant\":\"" + variant + "\",\"device_ms\":" + fmt_double(ms) +
                  ",\"bytes\":" + fmt_double(elements * elem) + ",\"gbps\":" +
                  fmt_double(elements * elem / (ms * 1e6)) + ",\"bit_identical\":" + (same ? "true" : "false") + "}");
    }
    char line[200];
    std::snprintf(line, sizeof line, "%s%s fwd %.3g/%.3g bwd %.3g/%.3g%s", headline.empty() ? "" : ", ",
                  std::string(dtype_name(c.dtype)).c_str(), ff, pf, fb, pb, same ? "" : " NOT BIT-IDENTICAL");
    if (c.cols == 4096) headline += line;
    EXPECT_GT(ff, 0.0);
    EXPECT_GT(pf, 0.0);
  }
  std::printf("kernel-timing: add+rmsnorm 8192x4096 fused/pair ms: %s\n", headline.c_str());
}

TEST_F(KernelTiming, DISABLED_MoeCombineWeightGrad) {
  struct Case {
    std::int64_t tokens, k, d;
    DType dtype;
  };
  const Case cases[] = {{8192, 2, 768, DType::kF32}, {8192, 2, 768, DType::kBF16}, {8192, 8, 4096, DType::kF32},
                        {8192, 8, 4096, DType::kBF16}};
  std::string headline;
  for (const Case& c : cases) {
    const std::int64_t r = c.tokens * c.k;
    const std::string what = std::to_string(c.tokens) + "x" + std::to_string(c.k) + "x" + std::to_string(c.d) + " " +
                             std::string(dtype_name(c.dtype));
    const std::uint64_t s = seed_ + static_cast<std::uint64_t>(c.k * 7 + c.d * 13) + (c.dtype == DType::kBF16);
    const Tensor dy = device_values(Shape{c.tokens, c.d}, c.dtype, s + 1, 1e-2f);
    const Tensor src = device_values(Shape{r, c.d}, c.dtype, s + 2, 1.0f);
    const Tensor rows = to_gpu(random(Shape{c.tokens, c.k}, DType::kI32, 0, static_cast<float>(r - 1)));
    Tensor dw = device_empty(Shape{c.tokens, c.k}, DType::kF32);
    const auto launch = [&] {
      kd::moe_combine_weight_grad(in(dy), in(src), rows.data<std::int32_t>(), dw.data<float>(), c.tokens, c.k, c.d,
                                  native());
    };
    // Correct first: the CPU backend's bits.
    launch();
    Tensor want = empty_cpu(Shape{c.tokens, c.k}, DType::kF32);
    ops::moe_combine_weight_grad(cpu(), to_cpu(dy), to_cpu(src), to_cpu(rows), want);
    const std::int64_t bad = differing(want, to_cpu(dw));
    EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << want.numel() << " outputs differ from the CPU's";
    const double ms = device_ms(launch);
    const double bytes = static_cast<double>((c.tokens + r) * c.d) * static_cast<double>(dtype_size(c.dtype));
    std::printf("[ timing ] moe_combine_weight_grad %-22s %.4f ms, %.0f GB/s%s\n", what.c_str(), ms,
                bytes / (ms * 1e6), bad == 0 ? "" : " (NOT the CPU's bits)");
    report_json(std::string("{\"measurement\":\"moe_weight_grad\",\"tokens\":") + std::to_string(c.tokens) +
                ",\"top_k\":" + std::to_string(c.k) + ",\"d\":" + std::to_string(c.d) + ",\"dtype\":\"" +
                std::string(dtype_name(c.dtype)) + "\",\"device_ms\":" + fmt_double(ms) + ",\"bytes\":" +
                fmt_double(bytes) + ",\"gbps\":" + fmt_double(bytes / (ms * 1e6)) +
                ",\"bit_identical\":" + (bad == 0 ? "true" : "false") + "}");
    char line[160];
    std::snprintf(line, sizeof line, "%s%s %.0f GB/s%s", headline.empty() ? "" : ", ", what.c_str(),
                  bytes / (ms * 1e6), bad == 0 ? "" : " NOT THE CPU'S BITS");
    headline += line;
    EXPECT_GT(ms, 0.0);
  }
  std::printf("kernel-timing: moe weight grad: %s\n", headline.c_str());
}

}  // namespace
}  // namespace cleave::testing::kernel_timing_test

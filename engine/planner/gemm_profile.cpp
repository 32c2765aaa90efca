// See gemm_profile.hpp.
#include "engine/planner/gemm_profile.hpp"
#include "engine/planner/median.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "engine/core/tensor.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::planner {
namespace {

// B's values start this many elements into the pool, so A and B differ; a multiple of 128 keeps every operand as
// aligned as a fresh allocation (cuBLASLt chooses its kernels by pointer alignment).
constexpr std::int64_t kShift = 1 << 16;

// splitmix64: uniform values in [-1, 1), fast enough for a few hundred million on the host.
std::vector<float> random_values(std::int64_t n, std::uint64_t seed) {
  std::vector<float> out(static_cast<std::size_t>(n));
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  for (float& v : out) {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    v = static_cast<float>(static_cast<double>(z >> 40) / static_cast<double>(1ull << 24) * 2.0 - 1.0);
  }
  return out;
}

// The random operand pool of one dtype on the device, and its values on the host as the device holds them.
struct Pool {
  Tensor device;
  std::vector<float> host;
};

Pool make_pool(const ops::Context& ctx, const std::vector<float>& values, DType dtype) {
  const auto n = static_cast<std::int64_t>(values.size());
  Tensor host = Tensor::empty({n}, dtype, MemoryCategory::kWorkspace, cpu_allocator());
  Pool pool;
  pool.host.resize(values.size());
  if (dtype == DType::kBF16) {
    auto* bits = static_cast<std::uint16_t*>(host.raw_data());
    for (std::size_t i = 0; i < values.size(); ++i) {
      bits[i] = float_to_bf16(values[i]);
      pool.host[i] = bf16_to_float(bits[i]);
    }
  } else {
    std::copy(values.begin(), values.end(), host.data<float>());
    pool.host = values;
  }
  pool.device = ops::to_device(ctx, host, MemoryCategory::kWorkspace);
  return pool;
}

float element(const Tensor& host_row, std::int64_t j) {
  if (host_row.dtype() == DType::kBF16) return bf16_to_float(static_cast<const std::uint16_t*>(host_row.raw_data())[j]);
  return host_row.data<float>()[j];
}

struct Operands {
  Tensor a, b, c;
  ops::GemmOptions options;
};

Operands operands(const TrainingGemm& g, const Pool& in, const Tensor& c_pool) {
  Operands o;
  o.a = in.device.slice(0, g.m * g.k).view(g.trans_a ? Shape{g.k, g.m} : Shape{g.m, g.k});
  o.b = in.device.slice(kShift, kShift + g.k * g.n).view(g.trans_b ? Shape{g.n, g.k} : Shape{g.k, g.n});
  o.c = c_pool.slice(0, g.m * g.n).view({g.m, g.n});
  o.options.trans_a = g.trans_a;
  o.options.trans_b = g.trans_b;
  o.options.beta = g.pass == GemmPass::kWeightGrad ? 1.0f : 0.0f;  // dW += dyᵀ x
  return o;
}

// Runs the GEMM once more with beta 0 and compares rows 0, m/2 and m-1 at up to 16 columns (the first and the
// last among them) with a double reference from the host copy of the inputs.
void check(const ops::Context& ctx, const TrainingGemm& g, DType dtype, const Pool& in, Operands o,
           const GemmTimingOptions& options, GemmTiming& timing) {
  const double rounding = o.c.dtype() == DType::kBF16 ? 1.0 / 256 : 1e-6;
  o.options.beta = 0.0f;
  ops::gemm(ctx, o.a, o.b, o.c, o.options);
  const std::set<std::int64_t> rows = {0, g.m / 2, g.m - 1};
  std::set<std::int64_t> cols = {0, g.n - 1};
  for (std::int64_t i = 1; i < 15 && i < g.n; ++i) cols.insert(i * (g.n - 1) / 15);
  const float* a = in.host.data();
  const float* b = in.host.data() + kShift;
  for (const std::int64_t r : rows) {
    const Tensor row = ops::to_host(ctx, o.c.slice(r, r + 1));
    for (const std::int64_t j : cols) {
      double ref = 0, scale = 0;
      for (std::int64_t l = 0; l < g.k; ++l) {
        const double x = g.trans_a ? a[l * g.m + r] : a[r * g.k + l];
        const double y = g.trans_b ? b[j * g.k + l] : b[l * g.n + j];
        ref += x * y;
        scale += std::abs(x * y);
      }
      CLEAVE_CHECK(scale > 0, "gemm profile: {} ({}): the reference at [{}, {}] has no non-zero product", g.what,
                   dtype_name(dtype), r, j);
      const double got = element(row, j);
      const double bound = rounding * std::abs(ref) + options.accumulation_tolerance * scale;
      CLEAVE_CHECK(std::isfinite(got) && std::abs(got - ref) <= bound,
                   "gemm profile: {} ({} inputs, {} out, m {} n {} k {}) on {} is wrong at [{}, {}]: {} against the "
                   "double reference {} (|difference| {:.3g} > {:.3g}); its times are not a profile",
                   g.what, dtype_name(dtype), dtype_name(o.c.dtype()), g.m, g.n, g.k, ctx.device.str(), r, j, got, ref,
                   std::abs(got - ref), bound);
      timing.worst_error = std::max(timing.worst_error, std::abs(got - ref) / scale);
      ++timing.checked;
    }
  }
}

// One GEMM's time: `run` once to size a sample (enough launches to last options.min_sample_s, at most
// options.max_launches), then the median over options.samples samples of one launch's seconds, timed by the device's
// events `begin` and `end` on ctx's stream. Returns {seconds, launches per sample}.
std::pair<double, int> time_gemm(const ops::Context& ctx, const std::function<void()>& run,
                                 const GemmTimingOptions& options, ops::DeviceEvent& begin, ops::DeviceEvent& end) {
  const auto interval = [&] {
    end.synchronize();
    return end.elapsed_ms_since(begin) * 1e-3;
  };
  begin.record(*ctx.stream);
  run();
  end.record(*ctx.stream);
  const double once = std::max(interval(), 1e-7);
  const int launches = static_cast<int>(
      std::clamp(std::ceil(options.min_sample_s / once), 1.0, static_cast<double>(options.max_launches)));
  std::vector<double> samples;
  for (int s = 0; s < options.samples; ++s) {
    begin.record(*ctx.stream);
    for (int l = 0; l < launches; ++l) run();
    end.record(*ctx.stream);
    samples.push_back(interval() / launches);
  }
  return {median(samples), launches};
}

}  // namespace

std::string_view gemm_pass_name(GemmPass pass) {
  switch (pass) {
    case GemmPass::kForward: return "forward";
    case GemmPass::kInputGrad: return "input grad";
    case GemmPass::kWeightGrad: return "weight grad";
  }
  return "?";
}

std::vector<TrainingGemm> linear_gemms(const std::string& name, std::int64_t tokens, std::int64_t in, std::int64_t out) {
  CLEAVE_CHECK(tokens > 0 && in > 0 && out > 0, "gemm profile: linear {} needs tokens, in and out > 0 (got {}, {}, {})",
               name, tokens, in, out);
  return {
      {name + " forward", GemmPass::kForward, tokens, out, in, false, true},       // y = x Wᵀ, W [out, in]
      {name + " input grad", GemmPass::kInputGrad, tokens, in, out, false, false},  // dx = dy W
      {name + " weight grad", GemmPass::kWeightGrad, out, in, tokens, true, false}, // dW += dyᵀ x
  };
}

std::vector<TrainingGemm> block_gemms(const GemmWidths& w) {
  std::vector<TrainingGemm> out;
  const auto layer = [&](const char* name, std::int64_t in, std::int64_t width) {
    for (TrainingGemm g : linear_gemms(name, w.tokens, in, width)) {
      g.what += fmt::format(" d{} ff{} tokens {}", w.d_model, w.d_ff, w.tokens);
      out.push_back(std::move(g));
    }
  };
  layer("qkv", w.d_model, 3 * w.d_model);
  layer("proj", w.d_model, w.d_model);
  layer("fc1", w.d_model, w.d_ff);
  layer("fc2", w.d_ff, w.d_model);
  return out;
}

std::vector<TrainingGemm> training_gemms(bool small) {
  std::vector<TrainingGemm> out;
  const auto add = [&](const std::vector<TrainingGemm>& gemms) { out.insert(out.end(), gemms.begin(), gemms.end()); };
  for (const std::int64_t tokens : {100, 1000}) {
    add(block_gemms({96, 384, tokens}));
    add(block_gemms({257, 1028, tokens}));
  }
  if (small) {
    add(block_gemms({768, 3072, 1024}));
  } else {
    for (const std::int64_t tokens : {1024, 4096, 8192}) {
      for (const std::int64_t d : {768, 1024, 1600, 2560, 4096}) add(block_gemms({d, 4 * d, tokens}));
    }
    for (const std::int64_t tokens : {1024, 4096}) {
      for (TrainingGemm g : linear_gemms("lm_head", tokens, 768, 50257)) {
        g.what += fmt::format(" d768 V50257 tokens {}", tokens);
        out.push_back(std::move(g));
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const TrainingGemm& x, const TrainingGemm& y) { return x.flops() < y.flops(); });
  return out;
}

GemmProfileResult measure_gemms(const ops::Context& ctx, const std::vector<TrainingGemm>& gemms,
                                const std::vector<DType>& dtypes, const GemmTimingOptions& options) {
  CLEAVE_CHECK(!gemms.empty() && !dtypes.empty(), "gemm profile: nothing to measure ({} GEMMs, {} dtypes)",
               gemms.size(), dtypes.size());
  CLEAVE_CHECK(options.samples >= 1 && options.warmups >= 0 && options.max_launches >= 1,
               "gemm profile: samples {} must be >= 1, warm-ups {} >= 0, launches per sample {} >= 1", options.samples,
               options.warmups, options.max_launches);
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  std::int64_t operand = 0, output = 0;
  for (const TrainingGemm& g : gemms) {
    CLEAVE_CHECK(g.m > 0 && g.n > 0 && g.k > 0, "gemm profile: {} has an empty shape (m {} n {} k {})", g.what, g.m,
                 g.n, g.k);
    operand = std::max({operand, g.m * g.k, g.k * g.n});
    output = std::max(output, g.m * g.n);
  }
  const std::vector<float> values = random_values(operand + kShift, options.seed);
  const Tensor c_f32 = Tensor::empty({output}, DType::kF32, MemoryCategory::kWorkspace, *ctx.allocator);
  auto begin = ops::make_device_event(ctx.device), end = ops::make_device_event(ctx.device);

  GemmProfileResult result;
  const int total = static_cast<int>(gemms.size() * dtypes.size());
  int done = 0;
  const auto report = [&](DType dtype, const std::string& what) {
    ++done;
    if (options.progress) options.progress(done, total, fmt::format("{} {}", dtype_name(dtype), what));
  };
  for (const DType dtype : dtypes) {
    CLEAVE_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, "gemm profile: {} GEMMs are not profiled (f32 or bf16)",
                 dtype_name(dtype));
    if (options.budget_s > 0 && elapsed() > options.budget_s) {  // not even the operands of this dtype
      result.skipped += static_cast<int>(gemms.size());
      for (const TrainingGemm& g : gemms) report(dtype, g.what + " (skipped: budget spent)");
      continue;
    }
    const Pool pool = make_pool(ctx, values, dtype);
    const Tensor c_low = dtype == DType::kBF16
                             ? Tensor::empty({output}, DType::kBF16, MemoryCategory::kWorkspace, *ctx.allocator)
                             : c_f32;
    for (const TrainingGemm& g : gemms) {
      if (options.budget_s > 0 && elapsed() > options.budget_s) {
        ++result.skipped;
        report(dtype, g.what + " (skipped: budget spent)");
        continue;
      }
      // bf16 training writes activations in bf16 and accumulates weight gradients into f32 (layers/linear.cpp).
      const Operands o = operands(g, pool, g.pass == GemmPass::kWeightGrad ? c_f32 : c_low);
      ops::fill(ctx, o.c, 0.0f);
      const auto run = [&] { ops::gemm(ctx, o.a, o.b, o.c, o.options); };
      for (int i = 0; i < options.warmups; ++i) run();
      GemmTiming timing;
      timing.gemm = g;
      timing.dtype = dtype;
      std::tie(timing.seconds, timing.launches) = time_gemm(ctx, run, options, *begin, *end);
      check(ctx, g, dtype, pool, o, options, timing);
      CLEAVE_CHECK(timing.seconds > 0, "gemm profile: {} ({}) timed at {} s", g.what, dtype_name(dtype), timing.seconds);
      result.timings.push_back(std::move(timing));
      report(dtype, g.what);
    }
  }
  result.seconds = elapsed();
  return result;
}

double measure_copy_bandwidth(const ops::Context& ctx, std::int64_t bytes, int samples) {
  CLEAVE_CHECK(bytes >= 4 && samples >= 1, "copy bandwidth: bytes {} must be >= 4 and samples {} >= 1", bytes, samples);
  const std::int64_t n = bytes / 4;
  const Tensor src = Tensor::empty({n}, DType::kF32, MemoryCategory::kWorkspace, *ctx.allocator);
  const Tensor dst = Tensor::empty({n}, DType::kF32, MemoryCategory::kWorkspace, *ctx.allocator);
  ops::fill(ctx, src, 1.5f);
  ops::copy(ctx, src, dst);  // warm-up
  auto begin = ops::make_device_event(ctx.device), end = ops::make_device_event(ctx.device);
  std::vector<double> times;
  for (int s = 0; s < samples; ++s) {
    begin->record(*ctx.stream);
    ops::copy(ctx, src, dst);
    end->record(*ctx.stream);
    end->synchronize();
    times.push_back(std::max(end->elapsed_ms_since(*begin) * 1e-3, 1e-9));
  }
  return 2.0 * static_cast<double>(n) * 4.0 / median(times);
}

std::vector<std::pair<double, double>> efficiency_curve(const std::vector<GemmTiming>& timings, DType dtype,
                                                        double peak_flops) {
  CLEAVE_CHECK(peak_flops > 0, "gemm profile: the peak must be > 0 FLOP/s, got {}", peak_flops);
  struct Bin {
    double log_sum = 0, flops = 0, seconds = 0;
    int count = 0;
  };
  std::map<int, Bin> bins;  // per half decade of FLOPs per GEMM
  for (const GemmTiming& t : timings) {
    if (t.dtype != dtype) continue;
    const double flops = t.gemm.flops(), rate = flops / t.seconds;
    CLEAVE_CHECK(rate <= peak_flops,
                 "gemm profile: {} ({}) ran at {:.1f} TFLOP/s, above the assumed peak {:.1f} TFLOP/s: the peak is not "
                 "this device's (give its dense {} peak with --peak-tflops-{})",
                 t.gemm.what, dtype_name(dtype), rate / 1e12, peak_flops / 1e12, dtype_name(dtype), dtype_name(dtype));
    Bin& b = bins[static_cast<int>(std::floor(2.0 * std::log10(flops)))];
    b.log_sum += std::log(flops);
    b.flops += flops;
    b.seconds += t.seconds;
    ++b.count;
  }
  CLEAVE_CHECK(!bins.empty(), "gemm profile: no {} GEMM was measured", dtype_name(dtype));
  std::vector<std::pair<double, double>> curve;
  for (const auto& [key, b] : bins) curve.emplace_back(std::exp(b.log_sum / b.count), b.flops / b.seconds / peak_flops);
  return curve;
}

HardwareProfile measured_gemm_profile(const HardwareProfile& base, const GemmProfileResult& result,
                                      std::int64_t device_memory, const std::string& name, const std::string& source) {
  CLEAVE_CHECK(base.has_roofline(), "gemm profile: the base profile '{}' has no peak_tflops / gemm_efficiency: the "
               "measured curve is a fraction of a peak it names (use a shipped GPU profile, profiles/)", base.name);
  HardwareProfile p = base;
  p.name = name;
  p.source = source;
  if (device_memory > 0) p.device_memory = device_memory;
  p.measured_gemms.clear();
  const auto has = [&](DType dtype) {
    return std::any_of(result.timings.begin(), result.timings.end(), [&](const GemmTiming& t) { return t.dtype == dtype; });
  };
  // bf16 is measured first; without it nothing measured would stand in gemm_efficiency.
  CLEAVE_CHECK(has(DType::kBF16), "gemm profile: no bf16 GEMM was measured ({} skipped by the time budget): no profile "
               "(give a larger --budget)", result.skipped);
  p.gemm_efficiency = efficiency_curve(result.timings, DType::kBF16, p.peak_flops_bf16);
  p.flops_bf16 = p.peak_flops_bf16 * p.gemm_efficiency.back().second;
  // The base's published per-shape table describes another GPU's GEMMs: this one's measured curve prices bf16 now.
  p.gemm_shape_efficiency = partition::GemmShapeTable();
  if (has(DType::kF32)) {
    p.gemm_efficiency_f32 = efficiency_curve(result.timings, DType::kF32, p.peak_flops_f32);
    p.flops_f32 = p.peak_flops_f32 * p.gemm_efficiency_f32.back().second;
  } else if (p.gemm_efficiency_f32.empty()) {
    p.gemm_efficiency_f32 = base.gemm_efficiency;  // f32 keeps the base's (assumed) curve, not bf16's measured one
  }
  for (const GemmTiming& t : result.timings) {
    p.measured_gemms.push_back({t.dtype, t.gemm.what, t.gemm.m, t.gemm.n, t.gemm.k, t.seconds});
  }
  if (!base.sources.empty()) {
    // The base cites each of its numbers (profiles/README.md, `sources`): the numbers measured here now cite this
    // measurement, the rest keep the base's citation; a curve f32 inherits is cited as what it is.
    const std::string measured = fmt::format("measured by `cleave profile --gemm` ({}): the GEMMs in gemm_measured", name);
    const auto cite = [&](const std::string& key, const std::string& text) {
      auto it = std::find_if(p.sources.begin(), p.sources.end(), [&](const auto& s) { return s.first == key; });
      if (it != p.sources.end()) it->second = text;
      else p.sources.emplace_back(key, text);
    };
    const auto base_cite = [&](const std::string& key) {
      auto it = std::find_if(base.sources.begin(), base.sources.end(), [&](const auto& s) { return s.first == key; });
      return it != base.sources.end() ? it->second : std::string("the base profile '" + base.name + "'");
    };
    cite("gemm_efficiency", measured + " (bf16)");
    cite("sustained_gemm_tflops.bf16", measured + " (bf16: the curve's largest bin)");
    if (has(DType::kF32)) {
      cite("gemm_efficiency_f32", measured + " (f32)");
      cite("sustained_gemm_tflops.f32", measured + " (f32: the curve's largest bin)");
    } else if (base.gemm_efficiency_f32.empty()) {
      cite("gemm_efficiency_f32", "the base profile's gemm_efficiency, not measured here: " + base_cite("gemm_efficiency"));
    }
    if (device_memory > 0) cite("device_memory_GiB", "the device's total memory, read when `cleave profile --gemm` ran");
    // Keep only the citations of numbers the profile still has (the shape table is gone), in sourced_keys order.
    const std::vector<std::string> keys = p.sourced_keys();
    std::vector<std::pair<std::string, std::string>> kept;
    for (const std::string& key : keys) {
      auto it = std::find_if(p.sources.begin(), p.sources.end(), [&](const auto& s) { return s.first == key; });
      if (it != p.sources.end()) kept.push_back(*it);
    }
    p.sources = std::move(kept);
  }
  return p;
}

}  // namespace cleave::planner

// The GEMM efficiency curve of a device, measured (`cleave profile --gemm`, engine/cli/profile_gemm.cpp):
//  - training_gemms lists the GEMMs a GPT block's linear layers launch (layers/linear.cpp): for each of qkv, proj,
//    fc1 and fc2 the forward y = x Wᵀ, the input gradient dx = dy W and the weight gradient dW += dyᵀ x, with the
//    transposes, output dtypes and beta the layers use, over a grid of widths and token counts (plus an LM head
//    and awkward sizes);
//  - measure_gemms times each through the op seam (ops::gemm on the caller's context: on cuda cuBLASLt, bf16 inputs
//    with f32 accumulation, f32 with TF32 off, as training runs them) with ops::DeviceEvent: warm-ups, then
//    `samples` back-to-back batches of launches (each at least min_sample_s long), the median batch over its
//    launch count; every timed GEMM is then run once more with beta 0 and checked against a double reference
//    at sampled elements (its first, middle and last row: the corners included), so a broken kernel cannot
//    produce a fast profile; the inputs are fresh random values (never zeros);
//  - efficiency_curve fits the profile's curve: points binned per half decade of FLOPs per GEMM, each bin at the
//    geometric mean of its FLOPs and its total FLOPs over total time over the peak (the rate that predicts the
//    bin's time), increasing in FLOPs as profiles/README.md requires.
// Invariant: nothing here includes a device header; a measurement that fails its check, or runs faster than the
// assumed peak, is an Error naming the GEMM, not a point of the curve.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/dtype.hpp"
#include "engine/planner/hardware_profile.hpp"
#include "kernels/ops/context.hpp"

namespace cleave::planner {

enum class GemmPass { kForward, kInputGrad, kWeightGrad };

// One GEMM as ops::gemm sees it: op(A) [m, k] x op(B) [k, n] -> C [m, n]. A is stored [k, m] when trans_a, B
// [n, k] when trans_b (row-major). The weight gradient accumulates (beta 1) into an f32 gradient.
struct TrainingGemm {
  std::string what;  // "fc1 forward d768 ff3072 tokens 4096"
  GemmPass pass = GemmPass::kForward;
  std::int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
};

// A block's widths and the tokens of one micro-batch (micro-batch x sequence length).
struct GemmWidths {
  std::int64_t d_model = 768, d_ff = 3072, tokens = 1024;
};

// The three GEMMs of a linear layer `name` ([tokens, in] -> [tokens, out]) as layers/linear.cpp launches them.
std::vector<TrainingGemm> linear_gemms(const std::string& name, std::int64_t tokens, std::int64_t in, std::int64_t out);
// qkv (d -> 3d), proj (d -> d), fc1 (d -> ff), fc2 (ff -> d) at these widths: 12 GEMMs.
std::vector<TrainingGemm> block_gemms(const GemmWidths& widths);
// The default grid, in increasing FLOPs: GPT-2 124M (d 768, ff 3072), 350M (1024), 1.5B (1600), 2.7B (2560) and a
// 6.7B-wide block (4096) at 1024, 4096 and 8192 tokens, GPT-2's LM head (vocabulary 50257, an odd width) at 1024
// and 4096 tokens, and awkward small blocks (d 96 and 257 at 100 and 1000 tokens). `small`: the d 96 / 257 and
// d 768 at 1024 tokens entries only (a quick check; tests).
std::vector<TrainingGemm> training_gemms(bool small = false);

struct GemmTimingOptions {
  int warmups = 2;            // untimed launches before the samples
  int samples = 5;            // timed batches; the median is kept
  double min_sample_s = 1e-3; // each batch repeats the GEMM until it lasts about this long (launch-bound sizes)
  int max_launches = 1000;    // per batch
  double budget_s = 0;        // > 0: stop starting new GEMMs after this many seconds (the rest are counted as skipped)
  std::uint64_t seed = 0;     // the inputs' random values
  // A checked element passes when |c - ref| <= rounding·|ref| + accumulation·Σ|a_i b_i| (the sum over k of the
  // products' magnitudes): rounding is the output's (bf16 2^-8, twice its half-ulp; f32 1e-6), accumulation bounds
  // f32 accumulation in any order (k·2^-24 is the worst case, ~1e-3 at k = 16384; random signs give ~sqrt(k)·2^-24,
  // ~1e-5). An output of zeros fails unless |ref| is below 1e-4 of the sum of |products| at every checked element.
  double accumulation_tolerance = 1e-4;
  // Called after each GEMM timed (or skipped by the budget) with the GEMMs done over every dtype, their total and
  // what was timed ("bf16 fc1 forward d768 ff3072 tokens 4096"); empty = silent. `cleave profile --gemm` prints a
  // progress line from it.
  std::function<void(int done, int total, const std::string& what)> progress;
};

struct GemmTiming {
  TrainingGemm gemm;
  DType dtype = DType::kF32;  // of A and B (bf16: C bf16, except the weight gradient's f32)
  double seconds = 0;         // one GEMM
  int launches = 1;           // per timed batch
  double worst_error = 0;     // largest |c - ref| / Σ|a_i b_i| over the checked elements
  int checked = 0;            // elements checked
};

struct GemmProfileResult {
  std::vector<GemmTiming> timings;
  int skipped = 0;            // GEMMs not started because the budget was spent
  double seconds = 0;         // wall time of the whole measurement
};

// Times `gemms` in each of `dtypes` (kF32, kBF16) on ctx's device (its stream, allocator and resources): the first
// dtype's GEMMs in the order given, then the next dtype's (so a spent budget skips the last dtype's largest GEMMs:
// list bf16 first, what training runs). Throws Error when a check fails.
GemmProfileResult measure_gemms(const ops::Context& ctx, const std::vector<TrainingGemm>& gemms,
                                const std::vector<DType>& dtypes, const GemmTimingOptions& options);

// The curve for one dtype from its timings (see the header), as [flops per GEMM, fraction of `peak_flops`]. Throws
// when a timing is faster than the peak (the peak assumed is not this device's) or no timing has that dtype.
std::vector<std::pair<double, double>> efficiency_curve(const std::vector<GemmTiming>& timings, DType dtype,
                                                        double peak_flops);

// The profile a measured device gets: `base` (a shipped profile of that GPU: links, memory bandwidth, ranks per
// node) with its efficiency curves replaced by the measured ones (gemm_efficiency for bf16, gemm_efficiency_f32 for
// f32), sustained_gemm_tflops set to the measured rate of the largest bin, the timings kept as measured_gemms,
// `device_memory` (bytes, > 0 replaces the base's), name and source as given. `base` must have a roofline (its
// peaks are the ones assumed) and `result` bf16 timings; without f32 timings (a spent budget) f32 keeps the base's
// assumed curve as gemm_efficiency_f32.
HardwareProfile measured_gemm_profile(const HardwareProfile& base, const GemmProfileResult& result,
                                      std::int64_t device_memory, const std::string& name, const std::string& source);

// Bytes per second a device-to-device copy of `bytes` (f32, ops::copy) streams, counting the read and the write:
// the median of `samples` event-timed copies after one warm-up. `cleave profile --gemm` prints it beside the base
// profile's memory_bandwidth_GBps (not written into the profile: that figure is the base's, stated in its source).
double measure_copy_bandwidth(const ops::Context& ctx, std::int64_t bytes, int samples);

std::string_view gemm_pass_name(GemmPass pass);  // "forward", "input grad", "weight grad"

}  // namespace cleave::planner

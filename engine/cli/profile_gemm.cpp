// `cleave profile --gemm --base FILE [--device cuda:0] [--out FILE] [--peak-tflops-bf16 X] [--peak-tflops-f32 X]
// [--samples K] [--budget S] [--small]`: measures a device's GEMM efficiency over the GEMMs GPT training launches
// (engine/planner/gemm_profile.hpp) and writes a hardware profile whose efficiency curves are the measured ones and
// whose peaks, links, memory bandwidth and ranks per node come from FILE (a shipped profile of that GPU, profiles/).
// The planner reads it like any shipped profile (`cleave plan --profile OUT`). run_profile hands over here when
// --gemm is given. `--device cpu` measures the CPU's GEMMs (a check of the command; its peaks must be given).
// Invariant: the output file is never overwritten, is written only after every GEMM passed its check, and is read
// back with load_profile before the command reports success.
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/cli/args.hpp"
#include "engine/cli/commands.hpp"
#include "engine/cli/utc_date.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/core/progress.hpp"
#include "engine/core/output_path.hpp"
#include "engine/planner/gemm_profile.hpp"
#include "engine/planner/hardware_profile.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::cli {
namespace {

ArgParser profile_gemm_args() {
  ArgParser p("profile",
              "cleave profile --gemm --base FILE [--device cuda:N] [--out FILE] [--peak-tflops-bf16 X]\n"
              "                   [--peak-tflops-f32 X] [--samples K] [--budget S] [--small]",
              R"(Measures a device's GEMM efficiency and writes a GPU profile for `cleave plan --profile OUT`:
  the forward, input-gradient and weight-gradient GEMMs of GPT blocks (d 768 to 4096, d_ff 4d, 1024 to 8192
  tokens; GPT-2's LM head; awkward small blocks) through the op seam (on cuda: cuBLASLt, bf16 inputs with f32
  accumulation and f32 with TF32 off, as training runs them), timed with device events (warm-ups, then the
  median of K batches), each result checked against a double reference at sampled elements.
The profile is FILE with its efficiency curves replaced by the measured ones (bf16: gemm_efficiency, f32:
gemm_efficiency_f32; fraction of FILE's peak_tflops unless --peak-tflops-* is given), the device's memory, and
the timed GEMMs in gemm_measured. Commit it into profiles/ (docs/planner.md, "Measured GPU profiles").)");
  p.flag("--gemm", "this mode: measure GEMM efficiency (without it: `cleave profile CONFIG`, block times)")
      .text("--base", "FILE", "the shipped profile of this GPU whose peaks, links and memory bandwidth are kept")
      .text("--device", "DEV", "cuda:N, or cpu to check the command on this machine", "cuda:0")
      .text("--out", "FILE", "where to write the profile (never overwritten)", "gemm_profile.json")
      .number("--peak-tflops-bf16", "X", "dense bf16 peak in TFLOP/s (default: FILE's peak_tflops.bf16)", std::nullopt)
      .number("--peak-tflops-f32", "X", "f32 (non-tensor) peak in TFLOP/s (default: FILE's peak_tflops.f32)", std::nullopt)
      .count("--samples", "K", "timed batches per GEMM (the median is kept)", 5)
      .number("--budget", "S", "seconds after which no new GEMM is started (0: none)", 0.0)
      .flag("--small", "a short list (awkward small blocks and one GPT-2 block at 1024 tokens)");
  return p;
}

Device parse_device(const std::string& text) {
  if (text == "cpu") return Device::cpu();
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5 && text.find_first_not_of("0123456789", 5) == std::string::npos) {
    return Device::cuda(std::stoi(text.substr(5)));
  }
  throw InputError(fmt::format("profile --gemm: --device {} is not cpu or cuda:N", text));
}

// "efficiency bf16 at 1e9/1e10/1e11 FLOPs: 0.52/0.70/0.75 (assumed 0.42/0.62/0.70)": the measured curve against the
// base profile's (scripts/gpu-check.sh's `profile` stage reads this line).
std::string compare_line(const planner::HardwareProfile& measured, const planner::HardwareProfile& base, bool bf16) {
  std::string got, assumed;
  for (const double flops : {1e9, 1e10, 1e11}) {
    got += fmt::format("{}{:.2f}", got.empty() ? "" : "/", measured.gemm_efficiency_at(flops, bf16));
    assumed += fmt::format("{}{:.2f}", assumed.empty() ? "" : "/", base.gemm_efficiency_at(flops, bf16));
  }
  return fmt::format("efficiency {} at 1e9/1e10/1e11 FLOPs: {} (assumed {})", bf16 ? "bf16" : "f32", got, assumed);
}

// What the reference checks found over every timed GEMM.
struct CheckedElements {
  double worst = 0;  // worst error, relative to the sum of |products|
  int checked = 0;   // elements checked
};

// One row per timed GEMM (dtype, shape, time, rate, fraction of the base's peak); returns what their checks found.
CheckedElements print_timings(const planner::GemmProfileResult& result, const planner::HardwareProfile& base) {
  CheckedElements checks;
  std::printf("%-5s %-44s %6s %6s %6s %10s %9s %8s\n", "dtype", "gemm", "m", "n", "k", "ms", "TFLOP/s", "of peak");
  for (const planner::GemmTiming& t : result.timings) {
    const double rate = t.gemm.flops() / t.seconds;
    const double peak = t.dtype == DType::kBF16 ? base.peak_flops_bf16 : base.peak_flops_f32;
    std::printf("%-5s %-44s %6lld %6lld %6lld %10.4f %9.2f %8.3f\n", std::string(dtype_name(t.dtype)).c_str(),
                t.gemm.what.c_str(), static_cast<long long>(t.gemm.m), static_cast<long long>(t.gemm.n),
                static_cast<long long>(t.gemm.k), t.seconds * 1e3, rate / 1e12, rate / peak);
    checks.worst = std::max(checks.worst, t.worst_error);
    checks.checked += t.checked;
  }
  return checks;
}

// The profile as JSON at `out_path` (checked new at the start), then read back by the planner's reader.
void write_profile(const planner::HardwareProfile& profile, const std::string& out_path) {
  {
    create_parent_dirs("profile --gemm: --out", out_path);
    std::ofstream out(out_path);
    out << planner::profile_to_json(profile).dump(2) << "\n";
    CLEAVE_CHECK(out.good(), "profile --gemm: could not write {}", out_path);
  }
  planner::load_profile(out_path);  // the planner's reader accepts what was written
}

// FILE (--base), a roofline profile, with --peak-tflops-* in place of its peaks where given.
planner::HardwareProfile base_profile(const Args& args, const std::string& base_path) {
  planner::HardwareProfile base = planner::load_profile(base_path);
  CLEAVE_CHECK_INPUT(base.has_roofline(), "profile --gemm: {} has no peak_tflops / gemm_efficiency (a measured CPU profile?): "
               "give a shipped GPU profile (profiles/)", base_path);
  if (args.given("--peak-tflops-bf16")) base.peak_flops_bf16 = args.number("--peak-tflops-bf16") * 1e12;
  if (args.given("--peak-tflops-f32")) base.peak_flops_f32 = args.number("--peak-tflops-f32") * 1e12;
  CLEAVE_CHECK_INPUT(base.peak_flops_bf16 > 0 && base.peak_flops_f32 > 0,
                     "profile --gemm: the peaks must be > 0 TFLOP/s (--peak-tflops-bf16 {}, --peak-tflops-f32 {})",
                     base.peak_flops_bf16 * 1e-12, base.peak_flops_f32 * 1e-12);
  return base;
}

// The closing lines: the measured curves against the base's, the copy bandwidth, the checks, the file written.
void print_summary(const planner::HardwareProfile& profile, const planner::HardwareProfile& base, bool f32_measured,
                   double copy_Bps, const CheckedElements& checks, const planner::GemmProfileResult& result,
                   const std::string& out_path) {
  std::printf("%s\n", compare_line(profile, base, true).c_str());
  if (f32_measured) {
    std::printf("%s\n", compare_line(profile, base, false).c_str());
  } else {
    std::printf("efficiency f32: not measured within the budget; the profile keeps the base's assumed f32 curve\n");
  }
  std::printf("device-to-device copy: %.0f GB/s (read + write); the profile keeps the base's memory_bandwidth_GBps "
              "%.0f\n", copy_Bps / 1e9, profile.memory_bandwidth_Bps / 1e9);
  std::printf("checked %d elements (worst error %.2g of the sum of |products|); %zu GEMMs timed, %d skipped by the "
              "budget\nwrote %s (%.1f s); commit it into profiles/ (docs/planner.md)\n",
              checks.checked, checks.worst, result.timings.size(), result.skipped, out_path.c_str(), result.seconds);
}

// What measure_on timed, with the options it timed them under (the profile's source cites them).
struct GemmMeasurement {
  planner::GemmTimingOptions options;
  planner::GemmProfileResult result;
  double copy_Bps = 0;  // a device-to-device copy's read + write bytes per second
};

// The training GEMMs (--small: the few of a quick check) timed on `device` within --budget, and a copy's bandwidth,
// on a stream, allocator and resources of its own that live for the measurement only; `progress` is told each GEMM.
GemmMeasurement measure_on(const Device& device, const Args& args, ProgressLine& progress) {
  ops::make_device_current(device);  // the stream below must belong to the current device
  auto stream = ops::make_device_stream(device);
  auto allocator = ops::make_device_allocator(device, stream->stream());
  auto resources = ops::make_device_resources(device);
  ops::Context ctx;
  ctx.device = device;
  ctx.stream = &stream->stream();
  ctx.allocator = allocator.get();
  ctx.resources = resources.get();

  GemmMeasurement out;
  planner::GemmTimingOptions& options = out.options;
  options.samples = static_cast<int>(args.count("--samples"));
  options.budget_s = args.number("--budget");
  options.seed = static_cast<std::uint64_t>(std::time(nullptr));
  const std::vector<planner::TrainingGemm> gemms = planner::training_gemms(args.on("--small"));
  options.progress = [&progress](int done, int total, const std::string& what) {
    progress.update(done, total, "gemm", what);
  };
  out.result = planner::measure_gemms(ctx, gemms, {DType::kBF16, DType::kF32}, options);
  // 1 GiB on a GPU (far beyond its L2), 64 MiB on the CPU (a check of the command).
  out.copy_Bps = planner::measure_copy_bandwidth(ctx, device.is_cuda() ? (1LL << 30) : (64LL << 20), 5);
  ops::synchronize(ctx);
  return out;
}

}  // namespace

int run_profile_gemm(int argc, char** argv) {
  const ArgParser parser = profile_gemm_args();
  const Args args = parser.parse(argc, argv);
  if (parser.print_help_if_asked(args)) return 0;
  const std::string base_path = args.text("--base");
  const std::string out_path = args.text("--out");
  CLEAVE_CHECK_INPUT(!base_path.empty(), "profile --gemm: give --base FILE, the shipped profile of this GPU whose peaks the "
               "efficiencies are fractions of (e.g. profiles/h100_sxm.json; H200 SXM has the same peaks)");
  CLEAVE_CHECK_INPUT(!std::filesystem::exists(out_path), "profile --gemm: {} exists; not overwriting it (choose another --out)",
               out_path);
  check_output_file("profile --gemm: --out", out_path);
  const Device device = parse_device(args.text("--device"));
  const planner::HardwareProfile base = base_profile(args, base_path);

  std::string command = "cleave profile";
  for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
  const ops::DeviceDescription what = ops::describe_device(device);
  std::printf("profile --gemm on %s: %s\n", device.str().c_str(), what.details.c_str());
  std::printf("assumed peaks (%s): bf16 %.1f TFLOP/s, f32 %.1f TFLOP/s\n",
              args.given("--peak-tflops-bf16") || args.given("--peak-tflops-f32") ? "--peak-tflops-*" : base_path.c_str(),
              base.peak_flops_bf16 / 1e12, base.peak_flops_f32 / 1e12);
  std::fflush(stdout);

  ProgressLine progress("profile --gemm");  // stderr: redrawn on a terminal, a line per 10 s into a log
  const GemmMeasurement measured = measure_on(device, args, progress);
  const planner::GemmProfileResult& result = measured.result;
  const planner::GemmTimingOptions& options = measured.options;
  const double copy_Bps = measured.copy_Bps;

  const CheckedElements checks = print_timings(result, base);
  const double worst = checks.worst;
  const int checked = checks.checked;
  const std::string date = utc_date_today();
  const std::string name = fmt::format("{} (GEMM efficiency measured {}; peaks, links and memory bandwidth from {})",
                                       what.name, date, base.name);
  const std::string source = fmt::format(
      "GEMM efficiency measured by `{}` on {} on {} in {:.1f} s: {} GEMMs ({} skipped by the time budget) through "
      "ops::gemm, the forward, input-gradient and weight-gradient GEMMs of GPT blocks' linear layers as training "
      "launches them (layers/linear.cpp), bf16 inputs with f32 accumulation (bf16 out; weight gradients into f32 with "
      "beta 1) and f32 with TF32 off; each the median of {} event-timed batches (each >= {} ms of back-to-back launches, "
      "operands warm in L2 where they fit) after {} warm-ups, and checked against a double reference at {} sampled "
      "elements in all (worst error {:.2g} of the sum of |products|). Efficiency = FLOPs / time / the assumed peak "
      "(bf16 {:.1f}, f32 {:.1f} TFLOP/s, {}); the curves bin the GEMMs per half decade of FLOPs (total FLOPs over "
      "total time per bin); gemm_measured lists every GEMM. Attention's batched GEMMs were not measured: they are "
      "priced from the same curves. A device-to-device copy streamed {:.0f} GB/s (read + write; memory_bandwidth_GBps "
      "is the base's). Everything else comes from {}: {}",
      command, device.str(), what.details, result.seconds, result.timings.size(), result.skipped, options.samples,
      options.min_sample_s * 1e3, options.warmups, checked, worst, base.peak_flops_bf16 / 1e12,
      base.peak_flops_f32 / 1e12,
      args.given("--peak-tflops-bf16") || args.given("--peak-tflops-f32") ? "given on the command line"
                                                                             : "from " + base_path,
      copy_Bps / 1e9, base_path, base.source);
  const bool f32_measured = std::any_of(result.timings.begin(), result.timings.end(),
                                       [](const planner::GemmTiming& t) { return t.dtype == DType::kF32; });
  const planner::HardwareProfile profile = planner::measured_gemm_profile(
      base, result, what.memory_bytes, name,
      source + (f32_measured ? "" : " NO f32 GEMM was measured within the budget: gemm_efficiency_f32 is the base's "
                                    "ASSUMED curve."));
  write_profile(profile, out_path);
  print_summary(profile, base, f32_measured, copy_Bps, checks, result, out_path);
  return 0;
}

}  // namespace cleave::cli

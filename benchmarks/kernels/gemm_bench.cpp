// GEMM throughput of kernels::cpu::gemm (OpenBLAS sgemm) on square and training shapes: 1 thread, and 2
// threads both ways (OpenBLAS's own pool, and the library's configure_kernel_threads: OpenMP slices of
// single-threaded sgemm), plus an MLP GEMM followed by an OpenMP GELU to show the two pools interfering.
//
// What it asserts before timing: every shape's result matches a naive double-precision dot product on a
// sample of output entries (all entries for the smallest), or the binary exits non-zero without timing.
// What it reports: the median over 5 repetitions (Google Benchmark, real time, after a warm-up) as a
// table and as one JSON line per row, with GFLOP/s = 2*m*n*k*batch / time and the ratio to the
// theoretical fp32 peak of `threads` cores:
//   peak = flops/cycle/core x GHz, flops/cycle = FMA units x SIMD lanes x 2 (multiply + add), where the
//   ISA comes from /proc/cpuinfo flags: avx512f -> 2 x 16 x 2 = 64, avx2+fma -> 2 x 8 x 2 = 32 (two
//   256-bit FMA pipes: Haswell..., Zen 2/3), avx -> 16, else 8. GHz is cpufreq's cpuinfo_max_freq when
//   the kernel exposes it, else "cpu MHz" from /proc/cpuinfo (under a hypervisor that is usually the
//   nominal clock, so a turbo-boosting core can exceed 100%); CLEAVE_CPU_GHZ overrides it.
// Extra mode: `gemm_bench --probe_coretype=NAME` sets OPENBLAS_CORETYPE=NAME with setenv() after
// OpenBLAS is loaded and reports whether the selected core changed (it does not: OpenBLAS reads the
// variable in its load-time constructor, so the variable has to come from the launcher).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/blas_runtime.hpp"
#include "kernels/cpu/gelu.hpp"
#include "kernels/cpu/gemm.hpp"

namespace {

namespace cpu = cleave::kernels::cpu;

struct GemmCase {
  std::string name;
  bool trans_a, trans_b;
  int64_t m, n, k, batch;
  bool then_gelu = false;  // time the GEMM followed by an OpenMP GELU over C, as in an MLP (GFLOP/s counts the GEMM)
};

// How the 2-thread rows are threaded: OpenBLAS's own pthread pool (configure_blas_threads(2), OpenMP 2) or
// the library's setting, configure_kernel_threads(2): OpenBLAS 1 thread, GEMMs sliced over the OpenMP team.
enum class Threading { kOpenBlas, kOpenMp };
const char* threading_name(Threading t) { return t == Threading::kOpenBlas ? "openblas" : "openmp"; }

// Training shapes: a GPT block with 8 x 64 tokens, d_model 256, MLP width 1024, 4 heads of 64, vocab 8192.
const std::vector<GemmCase>& cases() {
  static const std::vector<GemmCase> all = {
      {"square_256", false, false, 256, 256, 256, 1},
      {"square_512", false, false, 512, 512, 512, 1},
      {"square_1024", false, false, 1024, 1024, 1024, 1},
      {"square_1024_nt", false, true, 1024, 1024, 1024, 1},
      {"mlp_fc_fwd_512x1024x256_nt", false, true, 512, 1024, 256, 1},
      {"mlp_fc_dgrad_512x256x1024_nn", false, false, 512, 256, 1024, 1},
      {"mlp_fc_wgrad_1024x256x512_tn", true, false, 1024, 256, 512, 1},
      {"attn_scores_32x(64x64x64)_nt", false, true, 64, 64, 64, 32},
      {"lm_head_512x8192x256_nt", false, true, 512, 8192, 256, 1},
      {"mlp_fc_fwd_then_gelu", false, true, 512, 1024, 256, 1, true},
  };
  return all;
}

struct Operands {
  std::vector<float> a, b, c;
  int64_t lda, ldb, ldc, stride_a, stride_b, stride_c;
};

Operands make_operands(const GemmCase& g, uint64_t seed) {
  Operands o;
  o.lda = g.trans_a ? g.m : g.k;
  o.ldb = g.trans_b ? g.k : g.n;
  o.ldc = g.n;
  o.stride_a = g.m * g.k;
  o.stride_b = g.k * g.n;
  o.stride_c = g.m * g.n;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  o.a.resize(static_cast<size_t>(o.stride_a * g.batch));
  o.b.resize(static_cast<size_t>(o.stride_b * g.batch));
  o.c.assign(static_cast<size_t>(o.stride_c * g.batch), 0.0f);
  for (auto& v : o.a) v = dist(rng);
  for (auto& v : o.b) v = dist(rng);
  return o;
}

void run_gemm(const GemmCase& g, Operands& o) {
  if (g.batch == 1) {
    cpu::gemm(g.trans_a, g.trans_b, g.m, g.n, g.k, 1.0f, o.a.data(), o.lda, o.b.data(), o.ldb, 0.0f, o.c.data(), o.ldc);
  } else {
    cpu::gemm_strided_batched(g.trans_a, g.trans_b, g.m, g.n, g.k, 1.0f, o.a.data(), o.lda, o.stride_a, o.b.data(),
                              o.ldb, o.stride_b, 0.0f, o.c.data(), o.ldc, o.stride_c, g.batch);
  }
}

// Compares sampled C entries with a double dot product; the bound scales with sum |a||b| (float rounding).
bool validate(const GemmCase& g) {
  Operands o = make_operands(g, 7);
  std::fill(o.c.begin(), o.c.end(), std::nanf(""));
  run_gemm(g, o);
  std::mt19937_64 rng(11);
  const bool all = g.m * g.n * g.batch <= 256 * 256;
  const int64_t samples = all ? g.m * g.n * g.batch : 256;
  int64_t wrong = 0;
  double norm = 0.0;
  for (int64_t s = 0; s < samples; ++s) {
    const int64_t idx = all ? s : static_cast<int64_t>(rng() % static_cast<uint64_t>(g.m * g.n * g.batch));
    const int64_t bt = idx / (g.m * g.n), i = (idx / g.n) % g.m, j = idx % g.n;
    const float* a = o.a.data() + bt * o.stride_a;
    const float* b = o.b.data() + bt * o.stride_b;
    double dot = 0.0, mag = 0.0;
    for (int64_t p = 0; p < g.k; ++p) {
      const double av = g.trans_a ? a[p * o.lda + i] : a[i * o.lda + p];
      const double bv = g.trans_b ? b[j * o.ldb + p] : b[p * o.ldb + j];
      dot += av * bv;
      mag += std::fabs(av * bv);
    }
    const double got = o.c[static_cast<size_t>(bt * o.stride_c + i * o.ldc + j)];
    norm += std::fabs(got);
    if (!(std::fabs(got - dot) <= 1e-6 * mag + 1e-6)) {
      if (wrong < 3)
        std::fprintf(stderr, "  %s: C[%ld][%ld,%ld] = %.7g, reference %.7g\n", g.name.c_str(), (long)bt, (long)i,
                     (long)j, got, dot);
      ++wrong;
    }
  }
  if (wrong > 0 || !(norm > 0.0)) {
    std::fprintf(stderr, "validation FAILED for %s: %ld of %ld sampled entries wrong (|C| sum %.3g)\n", g.name.c_str(),
                 (long)wrong, (long)samples, norm);
    return false;
  }
  return true;
}

struct Machine {
  std::string cpu_model = "unknown", isa = "scalar", clock_source;
  int flops_per_cycle = 8;
  double ghz = 0.0;
  double peak_gflops_per_core() const { return flops_per_cycle * ghz; }
};

Machine detect_machine() {
  Machine mc;
  std::ifstream info("/proc/cpuinfo");
  std::string line, flags;
  double mhz = 0.0;
  while (std::getline(info, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    key.erase(key.find_last_not_of(" \t") + 1);
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model name" && mc.cpu_model == "unknown") mc.cpu_model = value;
    if (key == "cpu MHz" && mhz == 0.0) mhz = std::atof(value.c_str());
    if (key == "flags" && flags.empty()) flags = " " + value + " ";
  }
  auto has = [&](const char* f) { return flags.find(std::string(" ") + f + " ") != std::string::npos; };
  if (has("avx512f")) {
    mc.isa = "avx512f (assumed 2 FMA units x 16 lanes x 2)";
    mc.flops_per_cycle = 64;
  } else if (has("avx2") && has("fma")) {
    mc.isa = "avx2+fma (assumed 2 FMA units x 8 lanes x 2)";
    mc.flops_per_cycle = 32;
  } else if (has("avx")) {
    mc.isa = "avx (1 add + 1 mul x 8 lanes)";
    mc.flops_per_cycle = 16;
  } else {
    mc.isa = "sse (1 add + 1 mul x 4 lanes)";
  }
  std::ifstream maxfreq("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
  double khz = 0.0;
  if (const char* env = std::getenv("CLEAVE_CPU_GHZ")) {
    mc.ghz = std::atof(env);
    mc.clock_source = "CLEAVE_CPU_GHZ";
  } else if (maxfreq >> khz && khz > 0.0) {
    mc.ghz = khz / 1e6;
    mc.clock_source = "cpufreq cpuinfo_max_freq";
  } else {
    mc.ghz = mhz / 1e3;
    mc.clock_source = "/proc/cpuinfo cpu MHz (nominal under a hypervisor; turbo can exceed it)";
  }
  return mc;
}

struct Row {
  GemmCase g;
  int threads = 1;
  Threading threading = Threading::kOpenMp;
  double median_ms = 0.0, gflops = 0.0, cpu_over_real = 0.0, min_ms = 0.0;
  double flops() const { return 2.0 * g.m * g.n * g.k * g.batch; }
  double best_gflops() const { return min_ms > 0 ? flops() / (min_ms * 1e6) : 0.0; }
};

struct Registered {
  GemmCase g;
  int threads;
  Threading threading;
};
std::map<std::string, Registered>& registry() {
  static std::map<std::string, Registered> r;
  return r;
}

// Prints Google Benchmark's usual console output and keeps the median of every benchmark for the table.
class TableReporter : public benchmark::ConsoleReporter {
 public:
  std::vector<Row> rows;
  void ReportRuns(const std::vector<Run>& reports) override {
    ConsoleReporter::ReportRuns(reports);
    Row row;
    bool found = false;
    for (const auto& run : reports) {
      if (run.run_type != Run::RT_Aggregate) continue;
      const auto it = registry().find(run.run_name.function_name);
      if (it == registry().end()) continue;
      found = true;
      row.g = it->second.g;
      row.threads = it->second.threads;
      row.threading = it->second.threading;
      if (run.aggregate_name == "median") {
        row.median_ms = run.GetAdjustedRealTime();
        row.cpu_over_real = run.GetAdjustedCPUTime() / run.GetAdjustedRealTime();
        const auto counter = run.counters.find("GFLOP/s");
        row.gflops = counter != run.counters.end() ? counter->second.value : 0.0;
      } else if (run.aggregate_name == "min") {
        row.min_ms = run.GetAdjustedRealTime();
      }
    }
    if (found) rows.push_back(row);
  }
};

void bench_gemm(benchmark::State& state, GemmCase g, int threads, Threading threading) {
  if (threading == Threading::kOpenBlas) {
    cpu::configure_blas_threads(threads);
    omp_set_num_threads(threads);
  } else {
    cpu::configure_kernel_threads(threads);
  }
  Operands o = make_operands(g, 3);
  std::vector<float> activated(g.then_gelu ? o.c.size() : 0);
  for (auto _ : state) {
    run_gemm(g, o);
    if (g.then_gelu) cpu::gelu_forward(o.c.data(), activated.data(), static_cast<int64_t>(o.c.size()));
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * g.m * g.n * g.k * g.batch * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

int probe_coretype(const char* wanted) {
  const std::string before = cpu::blas_core_name();
  setenv("OPENBLAS_CORETYPE", wanted, 1);
  // A first GEMM after setenv, in case the library only looked at the variable lazily.
  std::vector<float> a(64 * 64, 1.0f), c(64 * 64, 0.0f);
  cpu::gemm(false, false, 64, 64, 64, 1.0f, a.data(), 64, a.data(), 64, 0.0f, c.data(), 64);
  const std::string after = cpu::blas_core_name();
  std::printf(
      "{\"bench\":\"openblas_coretype_probe\",\"setenv\":\"%s\",\"core_before\":\"%s\",\"core_after\":\"%s\","
      "\"setenv_after_load_works\":%s}\n",
      wanted, before.c_str(), after.c_str(), after != before ? "true" : "false");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--probe_coretype=", 17) == 0) return probe_coretype(argv[i] + 17);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  const Machine mc = detect_machine();
  const char* coretype_env = std::getenv("OPENBLAS_CORETYPE");
  std::printf("machine: %s | ISA %s | %.3f GHz from %s | peak %.1f GFLOP/s per core\n", mc.cpu_model.c_str(),
              mc.isa.c_str(), mc.ghz, mc.clock_source.c_str(), mc.peak_gflops_per_core());
  std::printf("blas: %s | core %s | OPENBLAS_CORETYPE=%s\n", cpu::blas_config().c_str(), cpu::blas_core_name().c_str(),
              coretype_env != nullptr ? coretype_env : "(unset)");

  for (const auto& g : cases()) {
    if (!validate(g)) return 1;
  }
  std::printf("validation: all %zu shapes match the double reference\n", cases().size());

  for (const auto& g : cases()) {
    for (const auto& [threads, threading] :
         {std::pair{1, Threading::kOpenMp}, std::pair{2, Threading::kOpenBlas}, std::pair{2, Threading::kOpenMp}}) {
      const std::string name = "gemm/" + g.name + "/threads:" + std::to_string(threads) +
                               (threads > 1 ? std::string("/") + threading_name(threading) : std::string());
      registry()[name] = {g, threads, threading};
      benchmark::RegisterBenchmark(name.c_str(), bench_gemm, g, threads, threading)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond)
          ->MinWarmUpTime(0.05)
          ->MinTime(0.1)
          ->Repetitions(5)
          ->ComputeStatistics("min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); })
          ->ReportAggregatesOnly(true);
    }
  }
  TableReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  std::map<std::string, double> one_thread;
  for (const auto& r : reporter.rows)
    if (r.threads == 1) one_thread[r.g.name] = r.gflops;
  std::printf(
      "\nGFLOP/s = median of 5 repetitions; best_GF = fastest repetition; cpu/real = CPU time of the calling thread\n"
      "over wall time (about 1.00 when no other process took the core; lower means the row was disturbed).\n"
      "threading: openblas = OpenBLAS's own pool (configure_blas_threads); openmp = configure_kernel_threads\n"
      "(OpenBLAS 1 thread, GEMM sliced over the OpenMP team). *_then_gelu also runs an OpenMP GELU over C.\n");
  std::printf("%-28s %2s %5s %5s %5s %5s %3s %-8s %9s %8s %6s %7s %8s %8s\n", "case", "op", "m", "n", "k", "batch",
              "thr", "threads", "median_ms", "GFLOP/s", "%peak", "vs_1thr", "best_GF", "cpu/real");
  for (const auto& r : reporter.rows) {
    const double peak = mc.peak_gflops_per_core() * r.threads;
    const double vs1 = one_thread.count(r.g.name) && one_thread[r.g.name] > 0 ? r.gflops / one_thread[r.g.name] : 0.0;
    std::printf("%-28s %c%c %5ld %5ld %5ld %5ld %3d %-8s %9.3f %8.1f %5.0f%% %6.2fx %8.1f %8.2f\n", r.g.name.c_str(),
                r.g.trans_a ? 'T' : 'N', r.g.trans_b ? 'T' : 'N', (long)r.g.m, (long)r.g.n, (long)r.g.k,
                (long)r.g.batch, r.threads, r.threads > 1 ? threading_name(r.threading) : "-", r.median_ms, r.gflops,
                peak > 0 ? 100.0 * r.gflops / peak : 0.0, vs1, r.best_gflops(), r.cpu_over_real);
  }
  for (const auto& r : reporter.rows) {
    const double peak = mc.peak_gflops_per_core() * r.threads;
    std::printf(
        "{\"bench\":\"gemm\",\"case\":\"%s\",\"trans_a\":%s,\"trans_b\":%s,\"m\":%ld,\"n\":%ld,\"k\":%ld,"
        "\"batch\":%ld,\"then_gelu\":%s,\"threads\":%d,\"threading\":\"%s\",\"median_ms\":%.4f,\"gflops\":%.2f,"
        "\"best_gflops\":%.2f,\"cpu_over_real\":%.3f,\"peak_gflops\":%.2f,\"ratio_to_peak\":%.3f,"
        "\"peak_assumption\":\"%s at %.3f GHz "
        "(%s)\",\"cpu\":\"%s\",\"blas_core\":\"%s\",\"openblas_coretype\":\"%s\"}\n",
        r.g.name.c_str(), r.g.trans_a ? "true" : "false", r.g.trans_b ? "true" : "false", (long)r.g.m, (long)r.g.n,
        (long)r.g.k, (long)r.g.batch, r.g.then_gelu ? "true" : "false", r.threads, threading_name(r.threading),
        r.median_ms, r.gflops, r.best_gflops(), r.cpu_over_real, peak, peak > 0 ? r.gflops / peak : 0.0, mc.isa.c_str(),
        mc.ghz, mc.clock_source.c_str(), mc.cpu_model.c_str(), cpu::blas_core_name().c_str(),
        coretype_env != nullptr ? coretype_env : "");
  }
  return 0;
}

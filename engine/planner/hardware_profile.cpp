// See hardware_profile.hpp.
#include "engine/planner/hardware_profile.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/error.hpp"
#include "engine/core/tensor.hpp"
#include "kernels/ops/ops.hpp"
#include "layers/layer.hpp"
#include "layers/models/builder.hpp"
#include "engine/planner/profile_measure.hpp"
#include "partition/cost_model.hpp"

namespace cleave::planner {
namespace {

using nlohmann::json;

double positive(const json& section, const std::string& key, const std::string& where) {
  CLEAVE_CHECK(section.contains(key), "{}: missing key '{}'", where, key);
  const json& v = section.at(key);
  CLEAVE_CHECK(v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0,
               "{}: '{}' must be a number > 0, got {}", where, key, v.dump());
  return v.get<double>();
}

// [[flops per GEMM, fraction of peak], ...] in increasing size, each fraction in (0, 1].
std::vector<std::pair<double, double>> read_curve(const json& root, const std::string& key, const std::string& path) {
  const json& curve = root.at(key);
  CLEAVE_CHECK(curve.is_array() && !curve.empty(),
               "profile {}: '{}' must be a non-empty list of [flops per GEMM, fraction of peak]", path, key);
  std::vector<std::pair<double, double>> out;
  for (const json& point : curve) {
    CLEAVE_CHECK(point.is_array() && point.size() == 2 && point[0].is_number() && point[1].is_number(),
                 "profile {}: {} entry {} is not [flops per GEMM, fraction of peak]", path, key, point.dump());
    const double flops = point[0].get<double>(), fraction = point[1].get<double>();
    CLEAVE_CHECK(std::isfinite(flops) && flops > 0 && fraction > 0 && fraction <= 1,
                 "profile {}: {} entry {} needs flops > 0 and a fraction in (0, 1]", path, key, point.dump());
    CLEAVE_CHECK(out.empty() || flops > out.back().first,
                 "profile {}: {} must list GEMM sizes in increasing order ({} after {})", path, key, flops,
                 out.empty() ? 0.0 : out.back().first);
    out.emplace_back(flops, fraction);
  }
  return out;
}

json curve_to_json(const std::vector<std::pair<double, double>>& curve) {
  json out = json::array();
  for (const auto& [flops, fraction] : curve) out.push_back({partition::file_number(flops), partition::file_number(fraction)});
  return out;
}

std::vector<HardwareProfile::MeasuredGemm> read_measured_gemms(const json& list, const std::string& path) {
  CLEAVE_CHECK(list.is_array(), "profile {}: 'gemm_measured' must be a list of {{\"dtype\", \"what\", \"m\", \"n\", "
               "\"k\", \"ms\"}}", path);
  std::vector<HardwareProfile::MeasuredGemm> out;
  for (const json& e : list) {
    const std::string where = fmt::format("profile {}: gemm_measured entry {}", path, out.size());
    CLEAVE_CHECK(e.is_object(), "{}: expected an object, got {}", where, e.dump());
    HardwareProfile::MeasuredGemm g;
    g.dtype = e.value("dtype", "");
    CLEAVE_CHECK(g.dtype == "bf16" || g.dtype == "f32", "{}: 'dtype' must be bf16 or f32, got '{}'", where, g.dtype);
    g.what = e.value("what", "");
    g.m = static_cast<std::int64_t>(positive(e, "m", where));
    g.n = static_cast<std::int64_t>(positive(e, "n", where));
    g.k = static_cast<std::int64_t>(positive(e, "k", where));
    g.seconds = positive(e, "ms", where) * 1e-3;
    out.push_back(std::move(g));
  }
  return out;
}

Link read_link(const json& root, const std::string& key, const std::string& file) {
  const std::string where = fmt::format("profile {}: {}", file, key);
  CLEAVE_CHECK(root.contains(key) && root.at(key).is_object(), "profile {}: missing object '{}'", file, key);
  const json& s = root.at(key);
  return {positive(s, "latency_us", where) * 1e-6, positive(s, "bandwidth_GBps", where) * 1e9};
}

}  // namespace

double HardwareProfile::gemm_efficiency_at(double flops, bool bf16) const {
  CLEAVE_ASSERT(has_roofline(), "profile '{}' has no gemm_efficiency curve", name);
  const auto& c = !bf16 && !gemm_efficiency_f32.empty() ? gemm_efficiency_f32 : gemm_efficiency;
  if (flops <= c.front().first) return c.front().second;
  if (flops >= c.back().first) return c.back().second;
  std::size_t i = 1;
  while (c[i].first < flops) ++i;
  const double x = (std::log(flops) - std::log(c[i - 1].first)) / (std::log(c[i].first) - std::log(c[i - 1].first));
  return c[i - 1].second + x * (c[i].second - c[i - 1].second);
}

double HardwareProfile::roofline_seconds(const partition::PassWork& work, bool bf16) const {
  const double peak = bf16 ? peak_flops_bf16 : peak_flops_f32;
  const double element = bf16 ? 2.0 : 4.0;
  double seconds = work.stream_bytes / memory_bandwidth_Bps;
  for (const partition::Gemm& g : work.gemms) {
    const double flops = g.flops();
    if (flops <= 0) continue;
    // A batched GEMM is one launch: its efficiency is that of its whole work.
    seconds += std::max(flops / (peak * gemm_efficiency_at(flops, bf16)), g.operand_bytes(element) / memory_bandwidth_Bps);
  }
  return seconds;
}

double HardwareProfile::cores_per_rank(int cores, int ranks) {
  if (cores <= 0) return 0.0;
  ranks = std::max(1, ranks);
  return ranks <= cores ? static_cast<double>(cores / ranks) : static_cast<double>(cores) / ranks;
}

double HardwareProfile::cores_per_rank(int ranks) const { return cores_per_rank(cores_per_node, ranks); }

double HardwareProfile::core_sharing(int ranks_on_node) const {
  if (cores_per_node <= 0) return 1.0;
  const int measured_on = measured_cores > 0 ? measured_cores : cores_per_node;
  return cores_per_rank(measured_on, measured_ranks_per_node) / cores_per_rank(ranks_on_node);
}

double Link::all_reduce_s(double bytes, int ranks) const {
  if (ranks <= 1 || bytes <= 0) return 0.0;
  const double n = ranks;
  return 2.0 * (n - 1) / n * bytes / bandwidth_Bps + 2.0 * (n - 1) * latency_s;
}

HardwareProfile load_profile(const std::string& path) {
  const json root = partition::read_profile_file(path);
  HardwareProfile p;
  p.name = root.value("name", path);
  p.source = root.value("source", "");
  CLEAVE_CHECK(!p.source.empty(), "profile {}: 'source' must say where the numbers come from", path);
  p.device_type = root.value("device_type", "cuda");
  CLEAVE_CHECK(p.device_type == "cpu" || p.device_type == "cuda", "profile {}: device_type must be cpu or cuda, got {}",
               path, p.device_type);
  const std::string where = "profile " + path;
  CLEAVE_CHECK(root.contains("sustained_gemm_tflops") && root.at("sustained_gemm_tflops").is_object(),
               "profile {}: missing object 'sustained_gemm_tflops' {{\"f32\": .., \"bf16\": ..}}", path);
  p.flops_f32 = positive(root.at("sustained_gemm_tflops"), "f32", where + ": sustained_gemm_tflops") * 1e12;
  p.flops_bf16 = positive(root.at("sustained_gemm_tflops"), "bf16", where + ": sustained_gemm_tflops") * 1e12;
  p.memory_bandwidth_Bps = positive(root, "memory_bandwidth_GBps", where) * 1e9;
  p.intra_node = read_link(root, "intra_node", path);
  p.inter_node = read_link(root, "inter_node", path);
  p.ranks_per_node = static_cast<int>(positive(root, "ranks_per_node", where));
  p.device_memory = static_cast<std::int64_t>(positive(root, "device_memory_GiB", where) * 1024.0 * 1024.0 * 1024.0);
  if (root.contains("peak_tflops") || root.contains("gemm_efficiency")) {
    CLEAVE_CHECK(root.contains("peak_tflops") && root.at("peak_tflops").is_object() && root.contains("gemm_efficiency"),
                 "profile {}: 'peak_tflops' {{\"f32\", \"bf16\"}} and 'gemm_efficiency' come together (the roofline "
                 "needs both)", path);
    p.peak_flops_f32 = positive(root.at("peak_tflops"), "f32", where + ": peak_tflops") * 1e12;
    p.peak_flops_bf16 = positive(root.at("peak_tflops"), "bf16", where + ": peak_tflops") * 1e12;
    p.gemm_efficiency = read_curve(root, "gemm_efficiency", path);
  }
  if (root.contains("gemm_efficiency_f32")) {
    CLEAVE_CHECK(p.has_roofline(), "profile {}: 'gemm_efficiency_f32' needs 'peak_tflops' and 'gemm_efficiency' (the "
                 "roofline it refines)", path);
    p.gemm_efficiency_f32 = read_curve(root, "gemm_efficiency_f32", path);
  }
  if (root.contains("gemm_measured")) p.measured_gemms = read_measured_gemms(root.at("gemm_measured"), path);
  if (root.contains("measured")) p.measured = partition::measured_from_json(root.at("measured"), path);
  // Cores: the file's, else (a cpu profile) this machine's; the ranks that shared them when it was measured.
  if (root.contains("cores_per_node")) {
    p.cores_per_node = static_cast<int>(positive(root, "cores_per_node", where));
  } else if (p.device_type == "cpu") {
    p.cores_per_node = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  // The cores the figures were taken on: the file's, else (written before the key) the node's.
  if (root.contains("measured_cores")) {
    CLEAVE_CHECK(p.cores_per_node > 0, "profile {}: 'measured_cores' needs 'cores_per_node' (the cores a plan's ranks "
                 "share; a cuda profile has a device per rank)", path);
    p.measured_cores = static_cast<int>(positive(root, "measured_cores", where));
  } else {
    p.measured_cores = p.cores_per_node;
  }
  p.measured_ranks_per_node = root.contains("measured_ranks_per_node")
                                  ? static_cast<int>(positive(root, "measured_ranks_per_node", where))
                                  : p.measured.has_blocks() ? std::max(1, std::min(p.measured.ranks, p.ranks_per_node))
                                                            : 1;
  return p;
}

json profile_to_json(const HardwareProfile& p) {
  json out = {{"format", "cleave-hardware-profile"},
              {"name", p.name},
              {"source", p.source},
              {"device_type", p.device_type},
              {"sustained_gemm_tflops", {{"f32", partition::file_number(p.flops_f32 / 1e12)}, {"bf16", partition::file_number(p.flops_bf16 / 1e12)}}},
              {"memory_bandwidth_GBps", partition::file_number(p.memory_bandwidth_Bps / 1e9)},
              {"intra_node", {{"latency_us", partition::file_number(p.intra_node.latency_s * 1e6)}, {"bandwidth_GBps", partition::file_number(p.intra_node.bandwidth_Bps / 1e9)}}},
              {"inter_node", {{"latency_us", partition::file_number(p.inter_node.latency_s * 1e6)}, {"bandwidth_GBps", partition::file_number(p.inter_node.bandwidth_Bps / 1e9)}}},
              {"ranks_per_node", p.ranks_per_node},
              {"device_memory_GiB", static_cast<double>(p.device_memory) / (1024.0 * 1024.0 * 1024.0)}};
  if (p.cores_per_node > 0) {
    out["cores_per_node"] = p.cores_per_node;
    out["measured_ranks_per_node"] = p.measured_ranks_per_node;
    out["measured_cores"] = p.measured_cores > 0 ? p.measured_cores : p.cores_per_node;
  }
  if (p.has_roofline()) {
    out["peak_tflops"] = {{"f32", partition::file_number(p.peak_flops_f32 / 1e12)},
                          {"bf16", partition::file_number(p.peak_flops_bf16 / 1e12)}};
    out["gemm_efficiency"] = curve_to_json(p.gemm_efficiency);
    if (!p.gemm_efficiency_f32.empty()) out["gemm_efficiency_f32"] = curve_to_json(p.gemm_efficiency_f32);
  }
  if (!p.measured_gemms.empty()) {
    // TFLOP/s and the fraction of the profile's peak are written for a reader (from the written ms, so a file
    // read and written again is the same text); the reader takes m, n, k and ms.
    json list = json::array();
    for (const HardwareProfile::MeasuredGemm& g : p.measured_gemms) {
      const double ms = partition::file_number(g.seconds * 1e3);
      const double rate = g.flops() / (ms * 1e-3);
      const double peak = g.dtype == "bf16" ? p.peak_flops_bf16 : p.peak_flops_f32;
      json e = {{"dtype", g.dtype}, {"what", g.what}, {"m", g.m}, {"n", g.n}, {"k", g.k}, {"ms", ms},
                {"tflops", partition::file_number(rate / 1e12)}};
      if (peak > 0) e["fraction_of_peak"] = partition::file_number(rate / peak);
      list.push_back(e);
    }
    out["gemm_measured"] = list;
  }
  if (p.measured.has_blocks() || p.measured.p2p) out["measured"] = partition::measured_to_json(p.measured);
  return out;
}

HardwareProfile calibrate_this_machine(int ranks, std::int64_t m, std::int64_t n, std::int64_t k) {
  HardwareProfile p;
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  const int threads = std::max(1, cores / std::max(1, ranks));
  p.name = fmt::format("this machine (measured: {} cores, {} thread(s) per rank)", cores, threads);
  p.device_type = "cpu";
  p.ranks_per_node = std::max(1, ranks);
  p.cores_per_node = cores;
  p.measured_cores = cores;
  p.measured_ranks_per_node = std::max(1, ranks);  // the share below prices `ranks` ranks on these cores
  ops::configure_cpu_threads(threads);
  m = std::clamp<std::int64_t>(m, 16, 2048);
  n = std::clamp<std::int64_t>(n, 16, 4096);
  k = std::clamp<std::int64_t>(k, 16, 4096);
  const ops::Context ctx;
  Tensor a = Tensor::empty({m, k}, DType::kF32, MemoryCategory::kWorkspace, cpu_allocator());
  Tensor b = Tensor::empty({k, n}, DType::kF32, MemoryCategory::kWorkspace, cpu_allocator());
  Tensor c = Tensor::empty({m, n}, DType::kF32, MemoryCategory::kWorkspace, cpu_allocator());
  ops::fill(ctx, a, 0.5f);
  ops::fill(ctx, b, 0.25f);
  ops::gemm(ctx, a, b, c);  // warm-up
  const auto start = std::chrono::steady_clock::now();
  int reps = 0;
  double elapsed = 0;
  while (elapsed < 0.2 || reps < 3) {
    ops::gemm(ctx, a, b, c);
    ++reps;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  // More ranks than cores: each rank gets cores / ranks of a core on average.
  const double share = std::min(1.0, static_cast<double>(cores) / std::max(1, ranks));
  p.flops_f32 = share * 2.0 * static_cast<double>(m * n * k) * reps / elapsed;
  p.flops_bf16 = p.flops_f32 * 0.8;  // the CPU bf16 path widens to f32 GEMMs and narrows back
  // Memory bandwidth: y += x over 8 MiB vectors.
  Tensor x = Tensor::empty({1 << 21}, DType::kF32, MemoryCategory::kWorkspace, cpu_allocator());
  Tensor y = Tensor::empty({1 << 21}, DType::kF32, MemoryCategory::kWorkspace, cpu_allocator());
  ops::fill(ctx, x, 1.0f);
  ops::fill(ctx, y, 0.0f);
  const auto s2 = std::chrono::steady_clock::now();
  int passes = 0;
  double t2 = 0;
  while (t2 < 0.05 || passes < 3) {
    ops::axpy(ctx, 0.5f, x, y);
    ++passes;
    t2 = std::chrono::duration<double>(std::chrono::steady_clock::now() - s2).count();
  }
  p.memory_bandwidth_Bps = share * 3.0 * 4.0 * static_cast<double>(1 << 21) * passes / t2;
  p.intra_node = Link{20e-6, 2e9};
  p.inter_node = Link{50e-6, 1e9};
  p.source = fmt::format("measured now: a {}x{}x{} f32 GEMM ran at {:.1f} GFLOP/s per rank; a streamed axpy at "
                         "{:.1f} GB/s{}; links are defaults for MPI over shared memory (20 us, 2 GB/s)",
                         m, k, n, p.flops_f32 / 1e9, p.memory_bandwidth_Bps / 1e9,
                         share < 1 ? fmt::format(" (x{:.2f}: {} ranks share {} cores)", share, ranks, cores) : "");
  return p;
}

HardwareProfile measure_this_machine(const partition::ModelSpec& spec, int ranks) {
  if (!partition::is_language_model(spec.type)) return calibrate_this_machine(ranks, 256, 256, 256);
  const auto g = spec.token_sizes();
  HardwareProfile p = calibrate_this_machine(ranks, 4 * g.seq_len, g.d_ff > 0 ? g.d_ff : 4 * g.d_model, g.d_model);
  measure_block_rates(p, spec, ranks);
  return p;
}

void measure_block_rates(HardwareProfile& profile, const partition::ModelSpec& spec, int ranks) {
  std::size_t index = spec.blocks.size();
  for (std::size_t i = 0; i < spec.blocks.size(); ++i) {
    if (partition::is_repeated_layer(spec.blocks[i].kind)) {
      index = i;
      break;
    }
  }
  if (index == spec.blocks.size()) return;
  auto layers = layers::build_blocks(spec, index, index + 1);
  layers::Layer& block = *layers.front();
  const partition::BlockCost cost = partition::block_cost(spec.blocks[index]);
  const std::int64_t t = spec.token_sizes().seq_len, d = spec.token_sizes().d_model;
  Tensor x = Tensor::empty({1, t, d}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  Tensor dy = Tensor::empty({1, t, d}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  layers::Context ctx;
  ops::fill(ctx, x, 0.1f);
  ops::fill(ctx, dy, 0.01f);
  const partition::BlockTimes times = time_block(block, x, dy, ctx, 5);
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  const double share = std::min(1.0, static_cast<double>(cores) / std::max(1, ranks));
  profile.block_forward_flops = share * cost.forward_flops / times.forward_s;
  profile.block_input_grad_flops = share * cost.input_grad_flops / times.input_grad_s;
  profile.block_weight_grad_flops = share * cost.weight_grad_flops / times.weight_grad_s;
  profile.source += fmt::format("; a {} ran at {:.1f} / {:.1f} / {:.1f} GFLOP/s (forward / input grad / weight grad), "
                                "used for every block",
                                spec.blocks[index].name, profile.block_forward_flops / 1e9,
                                profile.block_input_grad_flops / 1e9, profile.block_weight_grad_flops / 1e9);
}

}  // namespace cleave::planner

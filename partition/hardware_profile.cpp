// The profile file (hardware_profile.hpp): its one reader (load_profile: every key checked, a bad file an Error
// naming the file and the key), its writer (profile_to_json, which load_profile reads back to the same profile) and
// the keys its sources must cite. What a profile prices is hardware_profile_prices.cpp's.
#include "partition/hardware_profile.hpp"

#include <limits>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/core/enum_names.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"

namespace cleave::partition {
namespace {

using nlohmann::json;

// The JSON object of the profile file at `path`; throws Error naming the file when it is missing, not JSON or not
// a profile.
json read_profile_file(const std::string& path) {
  std::ifstream in(path);
  CLEAVE_CHECK(in.good(), "profile {}: cannot open it", path);
  std::stringstream text;
  text << in.rdbuf();
  json root;
  try {
    root = json::parse(text.str());
  } catch (const std::exception& e) {
    CLEAVE_THROW("profile {}: not valid JSON ({})", path, e.what());
  }
  CLEAVE_CHECK(root.is_object() && root.value("format", "") == "cleave-hardware-profile",
               "profile {}: expected an object with \"format\": \"cleave-hardware-profile\"", path);
  return root;
}

double positive(const json& section, const std::string& key, const std::string& where) {
  CLEAVE_CHECK(section.contains(key), "{}: missing key '{}'", where, key);
  const json& v = section.at(key);
  CLEAVE_CHECK(v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0,
               "{}: '{}' must be a number > 0, got {}", where, key, v.dump());
  return v.get<double>();
}

// device_memory_GiB: a number > 0 (GiB per rank), or "none": no cap of the profile's own (a profile measured by the
// planner, which states compute and links only). One spelling of "no cap" in the file, 0 bytes in memory.
std::int64_t read_device_memory(const json& root, const std::string& path) {
  CLEAVE_CHECK(root.contains("device_memory_GiB"), "profile {}: missing key 'device_memory_GiB' (GiB per rank, or "
               "\"none\" for no cap: then only --memory-limit or device.memory_limit caps a plan)", path);
  const json& v = root.at("device_memory_GiB");
  if (v.is_string() && v.get<std::string>() == kNoDeviceMemoryCap) return 0;
  CLEAVE_CHECK(v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0,
               "profile {}: 'device_memory_GiB' must be a number > 0 (GiB per rank), or \"{}\" for no cap (then only "
               "--memory-limit or device.memory_limit caps a plan), got {}", path, kNoDeviceMemoryCap, v.dump());
  return static_cast<std::int64_t>(v.get<double>() * 1024.0 * 1024.0 * 1024.0);
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
  for (const auto& [flops, fraction] : curve) out.push_back({file_number(flops), file_number(fraction)});
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
    CLEAVE_CHECK(e.contains("dtype"), "{}: missing key 'dtype' (\"f32\" or \"bf16\")", where);
    g.dtype = parse_profile_dtype(e.at("dtype"), where + ": 'dtype'");
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

// `sources` (profiles/README.md): an object of citations, one per number the profile has, each a non-empty string.
std::vector<std::pair<std::string, std::string>> read_sources(const json& root, const HardwareProfile& p,
                                                              const std::string& path) {
  const json& s = root.at("sources");
  CLEAVE_CHECK(s.is_object(), "profile {}: 'sources' must be an object {{\"<number's key>\": \"where it comes from\", ...}}",
               path);
  // The core counts (cpu profiles: the node a plan runs on, which a user edits for the target) may be cited and need
  // not be; every other number must.
  const auto is_cores = [](const std::string& k) {
    return k == "cores_per_node" || k == "measured_ranks_per_node" || k == "measured_cores";
  };
  std::vector<std::string> keys;
  for (const std::string& k : p.sourced_keys()) {
    if (!is_cores(k) || root.contains(k)) keys.push_back(k);
  }
  std::string allowed;
  for (const std::string& k : keys) allowed += (allowed.empty() ? "" : ", ") + k;
  for (const auto& [key, value] : s.items()) {
    CLEAVE_CHECK(std::find(keys.begin(), keys.end(), key) != keys.end(),
                 "profile {}: sources has '{}', which is not a number of this profile (its numbers: {})", path, key, allowed);
    CLEAVE_CHECK(value.is_string() && !value.get<std::string>().empty(),
                 "profile {}: sources.{} must be a non-empty string naming where the number comes from", path, key);
  }
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& k : keys) {
    if (is_cores(k) && !s.contains(k)) continue;
    CLEAVE_CHECK(s.contains(k), "profile {}: sources has no entry for '{}' (a profile with sources cites every number: "
                 "add \"{}\": \"<document, table or figure, URL>\")", path, k, k);
    out.emplace_back(k, s.at(k).get<std::string>());
  }
  return out;
}

// sm_count and gemm_tiles (together, on a roofline profile): the GEMM tile shapes that quantize its GEMMs.
void read_gemm_tiles(const json& root, const std::string& path, HardwareProfile& p) {
  const std::string where = "profile " + path;
  if (root.contains("sm_count") || root.contains("gemm_tiles")) {
    CLEAVE_CHECK(p.has_roofline() && root.contains("sm_count") && root.contains("gemm_tiles"),
                 "profile {}: 'sm_count' and 'gemm_tiles' come together and need 'peak_tflops' and 'gemm_efficiency' (the "
                 "roofline whose GEMMs they quantize)", path);
    p.sm_count = static_cast<int>(positive(root, "sm_count", where));
    const json& tiles = root.at("gemm_tiles");
    CLEAVE_CHECK(tiles.is_array() && !tiles.empty(), "profile {}: 'gemm_tiles' is a list of [tm, tn] tile shapes, e.g. "
                 "[[256, 128], [128, 128]]", path);
    for (const json& t : tiles) {
      CLEAVE_CHECK(t.is_array() && t.size() == 2 && t[0].is_number_integer() && t[1].is_number_integer() &&
                       t[0].get<int>() > 0 && t[1].get<int>() > 0,
                   "profile {}: 'gemm_tiles' entry {} is not [tm, tn] with positive integers", path, t.dump());
      p.gemm_tiles.emplace_back(t[0].get<int>(), t[1].get<int>());
    }
  }
}

// gemm_shape_efficiency (a roofline profile's): [m, n, k, fraction of the peak] points.
void read_gemm_shape_efficiency(const json& root, const std::string& path, HardwareProfile& p) {
  if (root.contains("gemm_shape_efficiency")) {
    CLEAVE_CHECK(p.has_roofline(), "profile {}: 'gemm_shape_efficiency' needs 'peak_tflops' and 'gemm_efficiency' (the "
                 "roofline whose GEMMs it prices)", path);
    const json& list = root.at("gemm_shape_efficiency");
    CLEAVE_CHECK(list.is_array(), "profile {}: 'gemm_shape_efficiency' is a list of [m, n, k, fraction of the peak]", path);
    std::vector<GemmShapeTable::Point> points;
    for (const json& e : list) {
      CLEAVE_CHECK(e.is_array() && e.size() == 4 && std::all_of(e.begin(), e.end(), [](const json& x) { return x.is_number(); }),
                   "profile {}: 'gemm_shape_efficiency' entry {} is not [m, n, k, fraction of the peak]", path, e.dump());
      points.push_back({e[0].get<double>(), e[1].get<double>(), e[2].get<double>(), e[3].get<double>()});
    }
    p.gemm_shape_efficiency = GemmShapeTable(points, "profile " + path);
  }
}

// The roofline (peak_tflops with gemm_efficiency) and what refines it: the f32 curve, the attention cap and rates,
// tiles, per-shape efficiencies and the kernel launch time; each refinement needs the roofline.
void read_roofline(const json& root, const std::string& path, HardwareProfile& p) {
  const std::string where = "profile " + path;
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
  if (root.contains("attention_efficiency")) {
    CLEAVE_CHECK(p.has_roofline(), "profile {}: 'attention_efficiency' needs 'peak_tflops' and 'gemm_efficiency' (the "
                 "roofline it caps)", path);
    p.attention_efficiency = positive(root, "attention_efficiency", where);
    CLEAVE_CHECK(p.attention_efficiency <= 1, "profile {}: 'attention_efficiency' {} is a fraction of the peak (0 < x <= 1)",
                 path, p.attention_efficiency);
  }
  if (root.contains("attention_rates")) {
    CLEAVE_CHECK(p.has_roofline(), "profile {}: 'attention_rates' needs 'peak_tflops' and 'gemm_efficiency' (the "
                 "roofline whose attention products it prices)", path);
    p.attention_rates = attention_rates_from_json(root.at("attention_rates"), "profile " + path);
  }
  read_gemm_tiles(root, path, p);
  read_gemm_shape_efficiency(root, path, p);
  if (root.contains("kernel_launch_us")) {
    CLEAVE_CHECK(p.has_roofline(), "profile {}: 'kernel_launch_us' needs 'peak_tflops' and 'gemm_efficiency' (the "
                 "roofline whose kernels it prices)", path);
    p.kernel_launch_s = positive(root, "kernel_launch_us", where) * 1e-6;
  }
}

// The cores per node (the file's, else a cpu profile's this machine's), the cores and ranks per node the figures
// were taken with.
void read_cores(const json& root, const std::string& path, HardwareProfile& p) {
  const std::string where = "profile " + path;
  // Cores: the file's, else (a cpu profile) this machine's; the ranks that shared them when it was measured.
  if (root.contains("cores_per_node")) {
    p.cores_per_node = static_cast<int>(positive(root, "cores_per_node", where));
  } else if (p.device_type == DeviceType::kCpu) {
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
}

HardwareProfile read_profile(const std::string& path) {
  const json root = read_profile_file(path);
  HardwareProfile p;
  p.name = root.value("name", path);
  p.source = root.value("source", "");
  CLEAVE_CHECK(!p.source.empty(), "profile {}: 'source' must say where the numbers come from", path);
  const std::string device_type = root.value("device_type", "cuda");
  const auto type = enum_from_name<DeviceType>(device_type);
  CLEAVE_CHECK(type.has_value(), "profile {}: 'device_type' must be one of {}, got \"{}\"", path,
               enum_choices<DeviceType>(), device_type);
  p.device_type = *type;
  const std::string where = "profile " + path;
  CLEAVE_CHECK(root.contains("sustained_gemm_tflops") && root.at("sustained_gemm_tflops").is_object(),
               "profile {}: missing object 'sustained_gemm_tflops' {{\"f32\": .., \"bf16\": ..}}", path);
  p.flops_f32 = positive(root.at("sustained_gemm_tflops"), "f32", where + ": sustained_gemm_tflops") * 1e12;
  p.flops_bf16 = positive(root.at("sustained_gemm_tflops"), "bf16", where + ": sustained_gemm_tflops") * 1e12;
  p.memory_bandwidth_Bps = positive(root, "memory_bandwidth_GBps", where) * 1e9;
  p.intra_node = read_link(root, "intra_node", path);
  p.inter_node = read_link(root, "inter_node", path);
  p.ranks_per_node = static_cast<int>(positive(root, "ranks_per_node", where));
  p.device_memory = read_device_memory(root, path);
  read_roofline(root, path, p);
  if (root.contains("gemm_measured")) p.measured_gemms = read_measured_gemms(root.at("gemm_measured"), path);
  if (root.contains("measured")) p.measured = measured_from_json(root.at("measured"), path);
  if (root.contains("routing_imbalance")) {
    p.routing_imbalance = routing_imbalance_from_json(root.at("routing_imbalance"), where + ": routing_imbalance");
  }
  if (root.contains("load_check")) p.load_check = load_check_from_json(root.at("load_check"), where + ": load_check");
  read_cores(root, path, p);
  if (root.contains("sources")) p.sources = read_sources(root, p, path);
  return p;
}

}  // namespace

std::vector<std::string> HardwareProfile::sourced_keys() const {
  std::vector<std::string> keys = {"sustained_gemm_tflops.f32", "sustained_gemm_tflops.bf16", "memory_bandwidth_GBps",
                                   "intra_node.latency_us", "intra_node.bandwidth_GBps", "inter_node.latency_us",
                                   "inter_node.bandwidth_GBps", "ranks_per_node"};
  if (device_memory > 0) keys.emplace_back("device_memory_GiB");  // "none" is no number to cite
  if (has_roofline()) {
    for (const char* k : {"peak_tflops.f32", "peak_tflops.bf16", "gemm_efficiency"}) keys.emplace_back(k);
    if (!gemm_efficiency_f32.empty()) keys.emplace_back("gemm_efficiency_f32");
    if (attention_efficiency > 0) keys.emplace_back("attention_efficiency");
    if (!attention_rates.empty()) keys.emplace_back("attention_rates");
    if (sm_count > 0) {
      keys.emplace_back("sm_count");
      keys.emplace_back("gemm_tiles");
    }
    if (!gemm_shape_efficiency.empty()) keys.emplace_back("gemm_shape_efficiency");
    if (kernel_launch_s > 0) keys.emplace_back("kernel_launch_us");
  }
  if (routing_imbalance) keys.emplace_back("routing_imbalance");
  if (cores_per_node > 0) {
    for (const char* k : {"cores_per_node", "measured_ranks_per_node", "measured_cores"}) keys.emplace_back(k);
  }
  return keys;
}

HardwareProfile load_profile(const std::string& path) {
  return reading_input([&] { return read_profile(path); });  // a file the command line names
}

json profile_to_json(const HardwareProfile& p) {
  json out = {{"format", "cleave-hardware-profile"},
              {"name", p.name},
              {"source", p.source},
              {"device_type", std::string(enum_name(p.device_type))},
              {"sustained_gemm_tflops", {{"f32", file_number(p.flops_f32 / 1e12)}, {"bf16", file_number(p.flops_bf16 / 1e12)}}},
              {"memory_bandwidth_GBps", file_number(p.memory_bandwidth_Bps / 1e9)},
              {"intra_node", {{"latency_us", file_number(p.intra_node.latency_s * 1e6)}, {"bandwidth_GBps", file_number(p.intra_node.bandwidth_Bps / 1e9)}}},
              {"inter_node", {{"latency_us", file_number(p.inter_node.latency_s * 1e6)}, {"bandwidth_GBps", file_number(p.inter_node.bandwidth_Bps / 1e9)}}},
              {"ranks_per_node", p.ranks_per_node},
              {"device_memory_GiB", p.device_memory > 0 ? json(static_cast<double>(p.device_memory) / (1024.0 * 1024.0 * 1024.0))
                                                        : json(kNoDeviceMemoryCap)}};
  if (p.cores_per_node > 0) {
    out["cores_per_node"] = p.cores_per_node;
    out["measured_ranks_per_node"] = p.measured_ranks_per_node;
    out["measured_cores"] = p.measured_cores > 0 ? p.measured_cores : p.cores_per_node;
  }
  if (p.has_roofline()) {
    out["peak_tflops"] = {{"f32", file_number(p.peak_flops_f32 / 1e12)},
                          {"bf16", file_number(p.peak_flops_bf16 / 1e12)}};
    out["gemm_efficiency"] = curve_to_json(p.gemm_efficiency);
    if (!p.gemm_efficiency_f32.empty()) out["gemm_efficiency_f32"] = curve_to_json(p.gemm_efficiency_f32);
    if (p.attention_efficiency > 0) out["attention_efficiency"] = file_number(p.attention_efficiency);
    if (!p.attention_rates.empty()) out["attention_rates"] = attention_rates_to_json(p.attention_rates);
    if (p.sm_count > 0) {
      out["sm_count"] = p.sm_count;
      json tiles = json::array();
      for (const auto& [tm, tn] : p.gemm_tiles) tiles.push_back({tm, tn});
      out["gemm_tiles"] = tiles;
    }
    if (!p.gemm_shape_efficiency.empty()) {
      json list = json::array();
      for (const GemmShapeTable::Point& g : p.gemm_shape_efficiency.points()) {
        list.push_back({file_number(g.m), file_number(g.n), file_number(g.k), file_number(g.fraction)});
      }
      out["gemm_shape_efficiency"] = list;
    }
    if (p.kernel_launch_s > 0) out["kernel_launch_us"] = file_number(p.kernel_launch_s * 1e6);
  }
  if (!p.measured_gemms.empty()) {
    // TFLOP/s and the fraction of the profile's peak are written for a reader (from the written ms, so a file
    // read and written again is the same text); the reader takes m, n, k and ms.
    json list = json::array();
    for (const HardwareProfile::MeasuredGemm& g : p.measured_gemms) {
      const double ms = file_number(g.seconds * 1e3);
      const double rate = g.flops() / (ms * 1e-3);
      const double peak = g.dtype == DType::kBF16 ? p.peak_flops_bf16 : p.peak_flops_f32;
      json e = {{"dtype", std::string(profile_dtype_name(g.dtype))}, {"what", g.what}, {"m", g.m}, {"n", g.n}, {"k", g.k}, {"ms", ms},
                {"tflops", file_number(rate / 1e12)}};
      if (peak > 0) e["fraction_of_peak"] = file_number(rate / peak);
      list.push_back(e);
    }
    out["gemm_measured"] = list;
  }
  if (p.measured.has_blocks() || p.measured.p2p || !p.measured.host_routing.empty()) out["measured"] = measured_to_json(p.measured);
  if (p.routing_imbalance) out["routing_imbalance"] = routing_imbalance_to_json(*p.routing_imbalance);
  if (p.load_check) out["load_check"] = load_check_to_json(*p.load_check);
  if (!p.sources.empty()) {
    json sources = json::object();
    for (const auto& [key, citation] : p.sources) sources[key] = citation;
    out["sources"] = sources;
  }
  return out;
}

}  // namespace cleave::partition

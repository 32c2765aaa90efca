// See measured_costs.hpp.
#include "partition/measured_costs.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "engine/core/error.hpp"

namespace cleave::partition {
namespace {

using nlohmann::json;

constexpr double kLatencyFloor_s = 1e-7;  // 0.1 us: no message costs less

double number(const json& node, const std::string& key, const std::string& where, bool allow_zero) {
  CLEAVE_CHECK(node.contains(key), "{}: missing key '{}'", where, key);
  const json& v = node.at(key);
  CLEAVE_CHECK(v.is_number() && std::isfinite(v.get<double>()) && (allow_zero ? v.get<double>() >= 0 : v.get<double>() > 0),
               "{}: '{}' must be a number {} 0, got {}", where, key, allow_zero ? ">=" : ">", v.dump());
  return v.get<double>();
}

json fit_to_json(const AlphaBeta& f) {
  return {{"ranks", f.ranks}, {"latency_us", file_number(f.latency_s * 1e6)},
          {"bandwidth_GBps", file_number(f.bandwidth_Bps / 1e9)}};
}

AlphaBeta fit_from_json(const json& node, const std::string& where) {
  CLEAVE_CHECK(node.is_object(), "{}: expected an object {{\"ranks\", \"latency_us\", \"bandwidth_GBps\"}}", where);
  AlphaBeta f;
  f.ranks = static_cast<int>(number(node, "ranks", where, false));
  CLEAVE_CHECK(f.ranks >= 2, "{}: 'ranks' must be >= 2, got {}", where, f.ranks);
  f.latency_s = number(node, "latency_us", where, true) * 1e-6;
  f.bandwidth_Bps = number(node, "bandwidth_GBps", where, false) * 1e9;
  return f;
}

std::string measured_list(const std::vector<MeasuredBlock>& blocks) {
  std::set<std::string> seen;
  for (const auto& b : blocks) seen.insert(fmt::format("{} at tp{}", b.shape, b.tp));
  std::string out;
  for (const auto& s : seen) out += (out.empty() ? "" : "; ") + s;
  return out;
}

json expert_rows_to_json(const MeasuredExpertRows& x) {
  const auto us = [](double s) { return file_number(s * 1e6); };
  const auto ns = [](double s) { return file_number(s * 1e9); };
  return {{"shape", x.shape}, {"tp", x.tp}, {"rows", x.rows},
          {"forward_us", us(x.intercept.forward_s)}, {"input_grad_us", us(x.intercept.input_grad_s)},
          {"weight_grad_us", us(x.intercept.weight_grad_s)}, {"forward_ns_per_row", ns(x.per_row.forward_s)},
          {"input_grad_ns_per_row", ns(x.per_row.input_grad_s)}, {"weight_grad_ns_per_row", ns(x.per_row.weight_grad_s)}};
}

MeasuredExpertRows expert_rows_from_json(const json& node, const std::string& where) {
  CLEAVE_CHECK(node.is_object() && node.contains("shape") && node.at("shape").is_string() && node.contains("rows") &&
                   node.at("rows").is_array(),
               "{}: expected an object {{\"shape\", \"tp\", \"rows\", \"forward_us\", \"forward_ns_per_row\", ...}}",
               where);
  MeasuredExpertRows x;
  x.shape = node.at("shape").get<std::string>();
  x.tp = static_cast<int>(number(node, "tp", where, false));
  for (const json& r : node.at("rows")) {
    CLEAVE_CHECK(r.is_number_integer() && r.get<std::int64_t>() > 0, "{}: 'rows' must hold positive integers, got {}",
                 where, r.dump());
    x.rows.push_back(r.get<std::int64_t>());
  }
  // Intercepts may be 0 (a fit through the origin); the slopes too (noise floored at 0 by the measurement).
  x.intercept = {number(node, "forward_us", where, true) * 1e-6, number(node, "input_grad_us", where, true) * 1e-6,
                 number(node, "weight_grad_us", where, true) * 1e-6};
  x.per_row = {number(node, "forward_ns_per_row", where, true) * 1e-9,
               number(node, "input_grad_ns_per_row", where, true) * 1e-9,
               number(node, "weight_grad_ns_per_row", where, true) * 1e-9};
  return x;
}

json host_routing_to_json(const MeasuredHostRouting& x) {
  const auto us = [](double s) { return file_number(s * 1e6); };
  const auto ns = [](double s) { return file_number(s * 1e9); };
  return {{"experts", x.experts}, {"top_k", x.top_k}, {"tokens", x.tokens},
          {"forward_us", us(x.intercept.forward_s)}, {"input_grad_us", us(x.intercept.input_grad_s)},
          {"forward_ns_per_token", ns(x.per_token.forward_s)}, {"input_grad_ns_per_token", ns(x.per_token.input_grad_s)}};
}

MeasuredHostRouting host_routing_from_json(const json& node, const std::string& where) {
  CLEAVE_CHECK(node.is_object() && node.contains("tokens") && node.at("tokens").is_array(),
               "{}: expected an object {{\"experts\", \"top_k\", \"tokens\", \"forward_us\", "
               "\"forward_ns_per_token\", \"input_grad_us\", \"input_grad_ns_per_token\"}}",
               where);
  MeasuredHostRouting x;
  x.experts = static_cast<std::int64_t>(number(node, "experts", where, false));
  x.top_k = static_cast<std::int64_t>(number(node, "top_k", where, false));
  CLEAVE_CHECK(x.top_k <= x.experts, "{}: 'top_k' {} exceeds 'experts' {}", where, x.top_k, x.experts);
  for (const json& t : node.at("tokens")) {
    CLEAVE_CHECK(t.is_number_integer() && t.get<std::int64_t>() > 0, "{}: 'tokens' must hold positive integers, got {}",
                 where, t.dump());
    x.tokens.push_back(t.get<std::int64_t>());
  }
  x.intercept = {number(node, "forward_us", where, true) * 1e-6, number(node, "input_grad_us", where, true) * 1e-6, 0.0};
  x.per_token = {number(node, "forward_ns_per_token", where, true) * 1e-9,
                 number(node, "input_grad_ns_per_token", where, true) * 1e-9, 0.0};
  return x;
}

}  // namespace

const MeasuredHostRouting* MeasuredCosts::host_routing_of(std::int64_t experts, std::int64_t top_k) const {
  const MeasuredHostRouting* widest = nullptr;
  for (const auto& x : host_routing) {
    if (x.experts == experts && x.top_k == top_k) return &x;
    if (widest == nullptr || x.experts > widest->experts) widest = &x;
  }
  return widest;
}

const MeasuredExpertRows* MeasuredCosts::expert_rows_of(const std::string& shape, int tp) const {
  for (const auto& x : expert_rows) {
    if (x.shape == shape && x.tp == tp) return &x;
  }
  return nullptr;
}

double file_number(double value) { return std::stod(fmt::format("{:.9g}", value)); }

std::string block_shape_key(const BlockSpec& b) {
  if (const BlockRules* rules = family_block_rules(b.kind)) return rules->shape_key(b);
  const std::string kind(block_kind_name(b.kind));
  switch (b.kind) {
    case BlockKind::kEmbedding: return fmt::format("{} V{} d{} T{}", kind, b.vocab_size, b.out_features, b.seq_len);
    case BlockKind::kLmHead:
      return fmt::format("{} d{} V{} T{}{}", kind, b.in_features, b.out_features, b.input.numel() / std::max<std::int64_t>(1, b.in_features),
                         b.tied ? " tied" : "");
    case BlockKind::kLinear: return fmt::format("{} {}->{}", kind, b.in_features, b.out_features);
    case BlockKind::kConv2d:
      return fmt::format("{} {} k{} -> {}", kind, b.input.str(), b.kernel, b.output.str());
    default: return fmt::format("{} {} -> {}", kind, b.input.str(), b.output.str());
  }
}

bool MeasuredCosts::covers(const std::string& shape, int tp) const {
  return std::any_of(blocks.begin(), blocks.end(), [&](const MeasuredBlock& b) { return b.shape == shape && b.tp == tp; });
}

double MeasuredCosts::warm_fraction(std::int64_t working_set_bytes) const {
  if (cache_bytes_per_rank <= 0) return 0.0;
  if (working_set_bytes <= cache_bytes_per_rank) return 1.0;
  return static_cast<double>(cache_bytes_per_rank) / static_cast<double>(working_set_bytes);
}

BlockTimes MeasuredCosts::block_times(const BlockSpec& block, int tp, std::int64_t micro_batch,
                                      const std::string& profile_name, double warm) const {
  CLEAVE_ASSERT(warm >= 0.0 && warm <= 1.0, "warm fraction {} outside [0, 1]", warm);
  const std::string shape = block_shape_key(block);
  std::vector<const MeasuredBlock*> points;
  for (const auto& b : blocks) {
    if (b.shape == shape && b.tp == tp) points.push_back(&b);
  }
  CLEAVE_CHECK(!points.empty(),
               "profile {}: no measurement of '{}' at tensor-parallel width {} (it holds: {}); run `cleave profile` "
               "on this config with the --world the plan is for",
               profile_name, shape, tp, measured_list(blocks));
  std::sort(points.begin(), points.end(), [](auto* a, auto* b) { return a->micro_batch < b->micro_batch; });
  const auto at = [warm](const MeasuredBlock& b) {
    if (!b.has_warm()) return BlockTimes{b.forward_s, b.input_grad_s, b.weight_grad_s};
    const auto mix = [warm](double cold, double hot) { return cold - warm * (cold - hot); };
    return BlockTimes{mix(b.forward_s, b.warm_forward_s), mix(b.input_grad_s, b.warm_input_grad_s),
                      mix(b.weight_grad_s, b.warm_weight_grad_s)};
  };
  if (points.size() == 1) {
    const double scale = static_cast<double>(micro_batch) / static_cast<double>(points[0]->micro_batch);
    const BlockTimes t = at(*points[0]);
    return {t.forward_s * scale, t.input_grad_s * scale, t.weight_grad_s * scale};
  }
  // The segment holding micro_batch, or the first / last one to extrapolate from.
  std::size_t hi = 1;
  while (hi + 1 < points.size() && points[hi]->micro_batch < micro_batch) ++hi;
  const MeasuredBlock& a = *points[hi - 1];
  const MeasuredBlock& b = *points[hi];
  const double u = static_cast<double>(micro_batch - a.micro_batch) / static_cast<double>(b.micro_batch - a.micro_batch);
  const auto lerp = [&](double x, double y) { return std::max(0.0, x + u * (y - x)); };
  const BlockTimes ta = at(a), tb = at(b);
  return {lerp(ta.forward_s, tb.forward_s), lerp(ta.input_grad_s, tb.input_grad_s),
          lerp(ta.weight_grad_s, tb.weight_grad_s)};
}

std::vector<AlphaBeta>& MeasuredCosts::fits(Collective op) {
  switch (op) {
    case Collective::kAllReduce: return all_reduce;
    case Collective::kReduceScatter: return reduce_scatter;
    case Collective::kAllGather: return all_gather;
  }
  CLEAVE_ASSERT(false, "unknown collective {}", static_cast<int>(op));
}

const std::vector<AlphaBeta>& MeasuredCosts::fits(Collective op) const {
  return const_cast<MeasuredCosts*>(this)->fits(op);
}

const AlphaBeta* MeasuredCosts::collective(Collective op, int group) const {
  for (const auto& f : fits(op)) {
    if (f.ranks == group) return &f;
  }
  return nullptr;
}

AlphaBeta fit_alpha_beta(const std::vector<std::pair<double, double>>& points, int ranks) {
  CLEAVE_CHECK(points.size() >= 2, "alpha-beta fit needs two or more message sizes, got {}", points.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const double n = static_cast<double>(points.size());
  for (const auto& [x, y] : points) sx += x, sy += y, sxx += x * x, sxy += x * y;
  const double denom = n * sxx - sx * sx;
  CLEAVE_CHECK(denom > 0, "alpha-beta fit needs two or more distinct message sizes");
  double beta = (n * sxy - sx * sy) / denom;
  double alpha = (sy - beta * sx) / n;
  beta = std::max(beta, 1e-15);  // a non-positive slope is noise: no more than 1 PB/s
  if (alpha < kLatencyFloor_s) {
    // Noise put the intercept at or below zero: refit the slope through the origin, floor the latency.
    alpha = kLatencyFloor_s;
    beta = std::max(sxy / sxx, 1e-15);
  }
  return {ranks, alpha, 1.0 / beta};
}

std::string_view profile_dtype_name(DType dtype) {
  CLEAVE_ASSERT(dtype == DType::kF32 || dtype == DType::kBF16, "a profile holds f32 or bf16 timings, not {}",
                dtype_name(dtype));
  return dtype_name(dtype);
}

DType parse_profile_dtype(const json& value, const std::string& where) {
  const std::string text = value.is_string() ? value.get<std::string>() : value.dump();
  if (text == "f32" || text == "fp32") return DType::kF32;  // "fp32": the old spelling of "measured.dtype"
  if (text == "bf16") return DType::kBF16;
  CLEAVE_THROW("{} must be \"f32\" or \"bf16\", got {}", where, value.dump());
}

json measured_to_json(const MeasuredCosts& c) {
  json blocks = json::array();
  for (const auto& b : c.blocks) {
    json entry = {{"shape", b.shape}, {"tp", b.tp}, {"micro_batch", b.micro_batch},
                  {"forward_ms", file_number(b.forward_s * 1e3)}, {"input_grad_ms", file_number(b.input_grad_s * 1e3)},
                  {"weight_grad_ms", file_number(b.weight_grad_s * 1e3)}};
    if (b.has_warm()) {
      entry["warm_forward_ms"] = file_number(b.warm_forward_s * 1e3);
      entry["warm_input_grad_ms"] = file_number(b.warm_input_grad_s * 1e3);
      entry["warm_weight_grad_ms"] = file_number(b.warm_weight_grad_s * 1e3);
    }
    if (!b.routed_rows.empty()) entry["routed_rows"] = b.routed_rows;
    blocks.push_back(entry);
  }
  json out = {{"ranks", c.ranks}, {"threads_per_rank", c.threads_per_rank}, {"dtype", profile_dtype_name(c.dtype)},
              {"blocks", blocks}};
  if (c.cache_bytes_per_rank > 0) out["cache_bytes_per_rank"] = c.cache_bytes_per_rank;
  if (c.p2p) out["p2p"] = fit_to_json(*c.p2p);
  if (c.adamw_s_per_param > 0) {
    out["optimizer_ns_per_param"] = {{"adamw", file_number(c.adamw_s_per_param * 1e9)},
                                     {"sgd", file_number(c.sgd_s_per_param * 1e9)},
                                     {"sgd_momentum", file_number(c.sgd_momentum_s_per_param * 1e9)}};
    if (c.grad_norm_s_per_param > 0) {
      out["optimizer_ns_per_param"]["grad_norm"] = file_number(c.grad_norm_s_per_param * 1e9);
      out["optimizer_ns_per_param"]["grad_clip"] = file_number(c.grad_clip_s_per_param * 1e9);
    }
  }
  if (c.sync_wait_per_compute > 0 || c.compute_stretch > 0 || c.sync_wait_per_meeting_s > 0) {
    out["sync_wait_per_compute"] = file_number(c.sync_wait_per_compute);
    out["compute_stretch"] = file_number(c.compute_stretch);
  }
  if (c.stream_stretch > 0) out["stream_stretch"] = file_number(c.stream_stretch);
  if (c.sync_wait_per_meeting_s > 0) out["sync_wait_per_meeting_us"] = file_number(c.sync_wait_per_meeting_s * 1e6);
  if (!c.ep_exchange.empty()) {
    json fits = json::array();
    for (const auto& f : c.ep_exchange) fits.push_back(fit_to_json(f));
    out["ep_exchange"] = fits;
  }
  if (c.count_exchange_s > 0) {
    out["count_exchange"] = {{"ranks", c.count_exchange_ranks}, {"latency_us", file_number(c.count_exchange_s * 1e6)}};
  }
  if (!c.expert_rows.empty()) {
    json rows = json::array();
    for (const auto& x : c.expert_rows) rows.push_back(expert_rows_to_json(x));
    out["expert_rows"] = rows;
  }
  if (!c.host_routing.empty()) {
    json rows = json::array();
    for (const auto& x : c.host_routing) rows.push_back(host_routing_to_json(x));
    out["host_routing"] = rows;
  }
  if (c.time_sharing) {
    const MeasuredCosts::TimeSharing& t = *c.time_sharing;
    out["time_sharing"] = {{"ranks_per_core", t.ranks_per_core}, {"compute_ratio", file_number(t.compute_ratio)},
                           {"handoff_us", file_number(t.handoff_s * 1e6)},
                           {"handoff_spin_us", file_number(t.handoff_spin_s * 1e6)}, {"method", t.method}};
  }
  for (const auto& [op, key] : enum_table<Collective>()) {
    if (c.fits(op).empty()) continue;
    json fits = json::array();
    for (const auto& f : c.fits(op)) fits.push_back(fit_to_json(f));
    out[std::string(key)] = fits;
  }
  return out;
}

void check_measured_covers(const MeasuredCosts& costs, const ModelSpec& spec, DType dtype, int tp, const std::string& source) {
  CLEAVE_CHECK(costs.dtype == dtype,
               "profile {} timed its blocks in {} but the config trains in {} (device.precision \"{}\"): profile again "
               "with this config (`cleave profile CONFIG`)",
               source, dtype_name(costs.dtype), dtype_name(dtype), dtype == DType::kBF16 ? "bf16" : "fp32");
  std::set<std::string> never;  // shapes measured at no width
  for (const auto& block : spec.blocks) {
    const std::string key = block_shape_key(block);
    if (std::none_of(costs.blocks.begin(), costs.blocks.end(), [&](const MeasuredBlock& b) { return b.shape == key; })) {
      never.insert(key);
    }
  }
  std::string missing;
  for (const auto& key : never) missing += (missing.empty() ? "" : ", ") + key;
  CLEAVE_CHECK(never.empty(),
               "profile {} was measured for another model: it has no measurement of {} (it holds: {}); run `cleave "
               "profile CONFIG` for this config",
               source, missing, costs.blocks.empty() ? std::string("nothing") : measured_list(costs.blocks));
  if (tp == kAnyWidth) return;
  for (const auto& block : spec.blocks) {
    CLEAVE_CHECK(costs.covers(block_shape_key(block), tp),
                 "profile {}: no measurement of '{}' at tensor-parallel width {} (it holds: {}); run `cleave profile "
                 "CONFIG --tp {}`",
                 source, block_shape_key(block), tp, measured_list(costs.blocks), tp);
  }
}

namespace {

// One entry of 'blocks' (`at` names it): a block shape's forward and gradient times at one width and micro-batch,
// cold and, with all three warm_* keys, warm.
MeasuredBlock measured_block_from_json(const json& b, const std::string& at) {
  CLEAVE_CHECK(b.is_object() && b.contains("shape") && b.at("shape").is_string(), "{}: missing string 'shape'", at);
  MeasuredBlock m;
  m.shape = b.at("shape").get<std::string>();
  m.tp = static_cast<int>(number(b, "tp", at, false));
  m.micro_batch = static_cast<std::int64_t>(number(b, "micro_batch", at, false));
  m.forward_s = number(b, "forward_ms", at, true) * 1e-3;
  m.input_grad_s = number(b, "input_grad_ms", at, true) * 1e-3;
  m.weight_grad_s = number(b, "weight_grad_ms", at, true) * 1e-3;
  const int warm_keys = static_cast<int>(b.contains("warm_forward_ms")) + static_cast<int>(b.contains("warm_input_grad_ms")) +
                        static_cast<int>(b.contains("warm_weight_grad_ms"));
  CLEAVE_CHECK(warm_keys == 0 || warm_keys == 3,
               "{}: 'warm_forward_ms', 'warm_input_grad_ms' and 'warm_weight_grad_ms' come together (it has {} of them)",
               at, warm_keys);
  if (warm_keys == 3) {
    m.warm_forward_s = number(b, "warm_forward_ms", at, false) * 1e-3;
    m.warm_input_grad_s = number(b, "warm_input_grad_ms", at, true) * 1e-3;
    m.warm_weight_grad_s = number(b, "warm_weight_grad_ms", at, true) * 1e-3;
  }
  if (b.contains("routed_rows")) {  // absent from profiles before 2026-11-30 (d) and for blocks without experts
    CLEAVE_CHECK(b.at("routed_rows").is_array(), "{}: 'routed_rows' must be an array of row counts", at);
    for (const json& r : b.at("routed_rows")) {
      CLEAVE_CHECK(r.is_number_integer() && r.get<std::int64_t>() >= 0,
                   "{}: 'routed_rows' must hold integers >= 0, got {}", at, r.dump());
      m.routed_rows.push_back(r.get<std::int64_t>());
    }
  }
  return m;
}

// 'blocks': every entry, no (shape, tp, micro-batch) measured twice.
std::vector<MeasuredBlock> measured_blocks_from_json(const json& node, const std::string& where) {
  CLEAVE_CHECK(node.contains("blocks") && node.at("blocks").is_array(), "{}: missing array 'blocks'", where);
  std::vector<MeasuredBlock> blocks;
  for (std::size_t i = 0; i < node.at("blocks").size(); ++i) {
    const std::string at = fmt::format("{}.blocks[{}]", where, i);
    MeasuredBlock m = measured_block_from_json(node.at("blocks")[i], at);
    for (const auto& other : blocks) {
      CLEAVE_CHECK(!(other.shape == m.shape && other.tp == m.tp && other.micro_batch == m.micro_batch),
                   "{}: '{}' at tp {} micro-batch {} is measured twice", at, m.shape, m.tp, m.micro_batch);
    }
    blocks.push_back(std::move(m));
  }
  return blocks;
}

// 'optimizer_ns_per_param' (`o`, named `at`) into `c`: each optimizer's update time per parameter, and the gradient
// norm and clip when the profile timed them.
void read_optimizer_costs(const json& o, const std::string& at, MeasuredCosts& c) {
  CLEAVE_CHECK(o.is_object(),
               "{}: expected an object {{\"adamw\", \"sgd\", \"sgd_momentum\"}} (and \"grad_norm\", "
               "\"grad_clip\")", at);
  c.adamw_s_per_param = number(o, "adamw", at, false) * 1e-9;
  c.sgd_s_per_param = number(o, "sgd", at, false) * 1e-9;
  c.sgd_momentum_s_per_param = number(o, "sgd_momentum", at, false) * 1e-9;
  if (o.contains("grad_norm") || o.contains("grad_clip")) {  // absent from profiles written before they were timed
    c.grad_norm_s_per_param = number(o, "grad_norm", at, false) * 1e-9;
    c.grad_clip_s_per_param = number(o, "grad_clip", at, false) * 1e-9;
  }
}

// 'time_sharing' (`x`, named `at`) into `c`: what sharing a core cost the profile's ranks.
void read_time_sharing(const json& x, const std::string& at, MeasuredCosts& c) {
  CLEAVE_CHECK(x.is_object(),
               "{}: expected an object {{\"ranks_per_core\", \"compute_ratio\", \"handoff_us\", \"handoff_spin_us\"}}", at);
  MeasuredCosts::TimeSharing t;
  t.ranks_per_core = static_cast<int>(number(x, "ranks_per_core", at, false));
  CLEAVE_CHECK(t.ranks_per_core >= 2, "{}: 'ranks_per_core' must be >= 2 (ranks sharing one core), got {}", at,
               t.ranks_per_core);
  t.compute_ratio = number(x, "compute_ratio", at, false);
  t.handoff_s = number(x, "handoff_us", at, true) * 1e-6;
  t.handoff_spin_s = number(x, "handoff_spin_us", at, true) * 1e-6;
  if (x.contains("method")) {
    CLEAVE_CHECK(x.at("method").is_string(), "{}: 'method' must be a string, got {}", at, x.at("method").dump());
    t.method = x.at("method").get<std::string>();
  }
  c.time_sharing = t;
}

// 'count_exchange' (`x`, named `at`) into `c`: the MoE count exchange's ranks and latency.
void read_count_exchange(const json& x, const std::string& at, MeasuredCosts& c) {
  CLEAVE_CHECK(x.is_object(), "{}: expected an object {{\"ranks\", \"latency_us\"}}", at);
  c.count_exchange_ranks = static_cast<int>(number(x, "ranks", at, false));
  CLEAVE_CHECK(c.count_exchange_ranks >= 2, "{}: 'ranks' must be >= 2, got {}", at, c.count_exchange_ranks);
  c.count_exchange_s = number(x, "latency_us", at, false) * 1e-6;
}

}  // namespace

MeasuredCosts measured_from_json(const json& node, const std::string& file) {
  const std::string where = fmt::format("profile {}: measured", file);
  CLEAVE_CHECK(node.is_object(), "{}: expected an object", where);
  MeasuredCosts c;
  c.ranks = static_cast<int>(number(node, "ranks", where, false));
  c.threads_per_rank = static_cast<int>(number(node, "threads_per_rank", where, false));
  c.dtype = node.contains("dtype") ? parse_profile_dtype(node.at("dtype"), where + ": 'dtype'") : DType::kF32;
  c.blocks = measured_blocks_from_json(node, where);
  if (node.contains("cache_bytes_per_rank")) {
    c.cache_bytes_per_rank = static_cast<std::int64_t>(number(node, "cache_bytes_per_rank", where, false));
  }
  if (node.contains("p2p")) c.p2p = fit_from_json(node.at("p2p"), where + ".p2p");
  if (node.contains("optimizer_ns_per_param")) {
    read_optimizer_costs(node.at("optimizer_ns_per_param"), where + ".optimizer_ns_per_param", c);
  }
  if (node.contains("sync_wait_per_compute")) {  // absent from profiles written before it was timed: 0, not priced
    c.sync_wait_per_compute = number(node, "sync_wait_per_compute", where, true);
    c.compute_stretch = number(node, "compute_stretch", where, true);
  }
  // Absent from profiles written before they were timed: 0, not priced.
  if (node.contains("stream_stretch")) c.stream_stretch = number(node, "stream_stretch", where, true);
  if (node.contains("sync_wait_per_meeting_us")) {
    c.sync_wait_per_meeting_s = number(node, "sync_wait_per_meeting_us", where, true) * 1e-6;
  }
  if (node.contains("time_sharing")) read_time_sharing(node.at("time_sharing"), where + ".time_sharing", c);
  if (node.contains("ep_exchange")) {  // absent from profiles before 2026-12-01 (m) and for models without experts
    const json& fits = node.at("ep_exchange");
    CLEAVE_CHECK(fits.is_array(), "{}: 'ep_exchange' must be an array of fits", where);
    for (std::size_t i = 0; i < fits.size(); ++i) {
      c.ep_exchange.push_back(fit_from_json(fits[i], fmt::format("{}.ep_exchange[{}]", where, i)));
    }
  }
  if (node.contains("count_exchange")) read_count_exchange(node.at("count_exchange"), where + ".count_exchange", c);
  if (node.contains("expert_rows")) {  // absent from profiles written before it was timed: the FLOP share prices
    CLEAVE_CHECK(node.at("expert_rows").is_array(), "{}: 'expert_rows' must be an array", where);
    for (std::size_t i = 0; i < node.at("expert_rows").size(); ++i) {
      c.expert_rows.push_back(expert_rows_from_json(node.at("expert_rows")[i], fmt::format("{}.expert_rows[{}]", where, i)));
    }
  }
  if (node.contains("host_routing")) {  // absent from profiles written before it was timed: routing not priced
    CLEAVE_CHECK(node.at("host_routing").is_array(), "{}: 'host_routing' must be an array", where);
    for (std::size_t i = 0; i < node.at("host_routing").size(); ++i) {
      c.host_routing.push_back(
          host_routing_from_json(node.at("host_routing")[i], fmt::format("{}.host_routing[{}]", where, i)));
    }
  }
  for (const auto& [op, name] : enum_table<Collective>()) {
    const std::string key(name);
    if (!node.contains(key)) continue;
    CLEAVE_CHECK(node.at(key).is_array(), "{}: '{}' must be an array of fits", where, key);
    for (std::size_t i = 0; i < node.at(key).size(); ++i) {
      c.fits(op).push_back(fit_from_json(node.at(key)[i], fmt::format("{}.{}[{}]", where, key, i)));
    }
  }
  return c;
}

}  // namespace cleave::partition

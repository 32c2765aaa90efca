// See attention_rates.hpp.
#include "partition/attention_rates.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "partition/measured_costs.hpp"

namespace cleave::partition {

using nlohmann::json;

std::string_view attention_pass_name(AttentionPass pass) {
  switch (pass) {
    case AttentionPass::kForward: return "forward";
    case AttentionPass::kBackward: return "backward";
    case AttentionPass::kNone: break;
  }
  return "none";
}

std::string_view attention_mask_name(AttentionMask mask) {
  switch (mask) {
    case AttentionMask::kCausal: return "causal";
    case AttentionMask::kAny: return "any";
    case AttentionMask::kNone: break;
  }
  return "none";
}

namespace {

std::string describe(const std::string& kernel, AttentionPass pass, AttentionMask mask, int head_dim) {
  return fmt::format("kernel '{}' {} mask '{}' head dim {}", kernel, attention_pass_name(pass),
                     attention_mask_name(mask), head_dim);
}

AttentionMask mask_of(bool causal) { return causal ? AttentionMask::kCausal : AttentionMask::kNone; }

// The file form's mask; throws Error naming `what` for any other word.
AttentionMask attention_mask_from_name(const std::string& name, const std::string& what) {
  for (AttentionMask m : {AttentionMask::kNone, AttentionMask::kCausal, AttentionMask::kAny}) {
    if (name == attention_mask_name(m)) return m;
  }
  CLEAVE_THROW("{}: 'mask' must be \"none\", \"causal\" or \"any\" (one published setting standing for both), got '{}'",
               what, name);
}

}  // namespace

AttentionRates::AttentionRates(std::vector<Curve> curves, const std::string& where)
    : curves_(std::move(curves)), where_(where) {
  for (std::size_t i = 0; i < curves_.size(); ++i) {
    const Curve& c = curves_[i];
    const std::string what = fmt::format("{}: attention_rates entry {}", where, i);
    CLEAVE_CHECK(!c.kernel.empty(), "{}: 'kernel' must name the kernel (cudnn, flash3, ...)", what);
    CLEAVE_CHECK(c.pass != AttentionPass::kNone, "{}: 'pass' must be forward or backward", what);
    CLEAVE_CHECK(c.head_dim > 0, "{}: 'head_dim' must be > 0, got {}", what, c.head_dim);
    CLEAVE_CHECK(!c.points.empty(), "{} ({}): 'tflops_by_seq' must list at least one [sequence length, TFLOP/s]", what,
                 describe(c.kernel, c.pass, c.mask, c.head_dim));
    for (std::size_t j = 0; j < c.points.size(); ++j) {
      const auto [t, rate] = c.points[j];
      CLEAVE_CHECK(std::isfinite(t) && t > 0 && std::isfinite(rate) && rate > 0,
                   "{}: point [{}, {}] needs a sequence length > 0 and TFLOP/s > 0", what, t, rate);
      CLEAVE_CHECK(j == 0 || t > c.points[j - 1].first,
                   "{}: sequence lengths must increase ({} after {})", what, t, c.points[j - 1].first);
    }
    for (std::size_t j = 0; j < i; ++j) {
      const Curve& o = curves_[j];
      CLEAVE_CHECK(!(o.kernel == c.kernel && o.pass == c.pass && o.mask == c.mask && o.head_dim == c.head_dim),
                   "{}: repeats entry {} ({})", what, j, describe(c.kernel, c.pass, c.mask, c.head_dim));
    }
  }
}

bool AttentionRates::has_kernel(const std::string& kernel) const {
  return std::any_of(curves_.begin(), curves_.end(), [&](const Curve& c) { return c.kernel == kernel; });
}

const AttentionRates::Curve* AttentionRates::find(const std::string& kernel, AttentionPass pass, bool causal,
                                                  double head_dim) const {
  for (const AttentionMask m : {mask_of(causal), AttentionMask::kAny}) {
    for (const Curve& c : curves_) {
      if (c.kernel == kernel && c.pass == pass && c.mask == m && c.head_dim == head_dim) return &c;
    }
  }
  return nullptr;
}

double AttentionRates::flops_per_s(const std::string& kernel, AttentionPass pass, bool causal, double head_dim,
                                   double seq_len) const {
  const Curve* found = find(kernel, pass, causal, head_dim);
  if (found == nullptr) {
    std::string has;
    for (const Curve& c : curves_) {
      if (c.kernel != kernel) continue;
      has += (has.empty() ? "" : "; ") +
             fmt::format("{} {} {}", attention_pass_name(c.pass), attention_mask_name(c.mask), c.head_dim);
    }
    CLEAVE_THROW("{}: attention_rates has no curve for {} (nor mask 'any'); the table has for '{}': {}. Add the published "
                 "benchmark's figures for it (profiles/README.md) or price this run with another --attention-kernel",
                 where_, describe(kernel, pass, mask_of(causal), static_cast<int>(head_dim)), kernel, has.empty() ? "nothing" : has);
  }
  const auto& p = found->points;
  double tflops = p.front().second;
  if (seq_len >= p.back().first) {
    tflops = p.back().second;
  } else if (seq_len > p.front().first) {
    std::size_t i = 1;
    while (p[i].first < seq_len) ++i;
    const double x = (std::log(seq_len) - std::log(p[i - 1].first)) / (std::log(p[i].first) - std::log(p[i - 1].first));
    tflops = p[i - 1].second + x * (p[i].second - p[i - 1].second);
  }
  return tflops * 1e12;
}

double AttentionRates::flops_per_s_between_head_dims(const std::string& kernel, AttentionPass pass, bool causal,
                                                     double head_dim, double seq_len) const {
  if (find(kernel, pass, causal, head_dim) != nullptr) return flops_per_s(kernel, pass, causal, head_dim, seq_len);
  double below = 0, above = 0;  // the nearest tabulated head dims on either side (0: none)
  for (const Curve& c : curves_) {
    if (find(kernel, pass, causal, c.head_dim) == nullptr) continue;
    if (c.head_dim < head_dim && c.head_dim > below) below = c.head_dim;
    if (c.head_dim > head_dim && (above == 0 || c.head_dim < above)) above = c.head_dim;
  }
  // Outside the published head dims nothing is extrapolated: flops_per_s refuses by name.
  if (below == 0 || above == 0) return flops_per_s(kernel, pass, causal, head_dim, seq_len);
  // Time per head over its 4·T² work units, d / rate, is interpolated linearly in d between the two published head dims.
  const double t_below = below / flops_per_s(kernel, pass, causal, below, seq_len);
  const double t_above = above / flops_per_s(kernel, pass, causal, above, seq_len);
  const double x = (head_dim - below) / (above - below);
  return head_dim / (t_below + x * (t_above - t_below));
}

AttentionRates attention_rates_from_json(const json& list, const std::string& where) {
  CLEAVE_CHECK(list.is_array() && !list.empty(),
               "{}: 'attention_rates' must be a non-empty list of {{\"kernel\", \"pass\", \"mask\", \"head_dim\", "
               "\"tflops_by_seq\"}}", where);
  std::vector<AttentionRates::Curve> curves;
  for (const json& e : list) {
    const std::string what = fmt::format("{}: attention_rates entry {}", where, curves.size());
    CLEAVE_CHECK(e.is_object() && e.contains("kernel") && e.contains("pass") && e.contains("mask") &&
                     e.contains("head_dim") && e.contains("tflops_by_seq"),
                 "{}: expected {{\"kernel\", \"pass\", \"mask\", \"head_dim\", \"tflops_by_seq\"}}, got {}", what, e.dump());
    AttentionRates::Curve c;
    CLEAVE_CHECK(e.at("kernel").is_string() && e.at("pass").is_string() && e.at("mask").is_string() &&
                     e.at("head_dim").is_number_integer(),
                 "{}: 'kernel', 'pass' and 'mask' are strings and 'head_dim' an integer, got {}", what, e.dump());
    c.kernel = e.at("kernel").get<std::string>();
    const std::string pass = e.at("pass").get<std::string>();
    CLEAVE_CHECK(pass == "forward" || pass == "backward", "{}: 'pass' must be \"forward\" or \"backward\", got '{}'", what, pass);
    c.pass = pass == "forward" ? AttentionPass::kForward : AttentionPass::kBackward;
    c.mask = attention_mask_from_name(e.at("mask").get<std::string>(), what);
    c.head_dim = e.at("head_dim").get<int>();
    const json& pts = e.at("tflops_by_seq");
    CLEAVE_CHECK(pts.is_array(), "{}: 'tflops_by_seq' must be a list of [sequence length, TFLOP/s]", what);
    for (const json& pt : pts) {
      CLEAVE_CHECK(pt.is_array() && pt.size() == 2 && pt[0].is_number() && pt[1].is_number(),
                   "{}: 'tflops_by_seq' entry {} is not [sequence length, TFLOP/s]", what, pt.dump());
      c.points.emplace_back(pt[0].get<double>(), pt[1].get<double>());
    }
    curves.push_back(std::move(c));
  }
  return AttentionRates(std::move(curves), where);
}

json attention_rates_to_json(const AttentionRates& rates) {
  json list = json::array();
  for (const AttentionRates::Curve& c : rates.curves()) {
    json pts = json::array();
    for (const auto& [t, r] : c.points) pts.push_back({file_number(t), file_number(r)});
    list.push_back({{"kernel", c.kernel}, {"pass", std::string(attention_pass_name(c.pass))},
                    {"mask", std::string(attention_mask_name(c.mask))},
                    {"head_dim", c.head_dim}, {"tflops_by_seq", pts}});
  }
  return list;
}

}  // namespace cleave::partition

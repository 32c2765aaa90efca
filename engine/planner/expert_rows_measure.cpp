// See expert_rows_measure.hpp.
#include "engine/planner/expert_rows_measure.hpp"

#include <algorithm>
#include <array>
#include <set>

#include "engine/core/allocator.hpp"
#include "engine/core/error.hpp"
#include "engine/core/tensor.hpp"
#include "engine/planner/median.hpp"
#include "engine/planner/stopwatch.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::planner {
namespace {

Tensor filled(const Shape& shape, float value, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype, MemoryCategory::kActivations, cpu_allocator());
  ops::fill(ops::Context{}, t, value);
  return t;
}

// The experts' tensors of one moe block shard at `rows` routed rows (weights shared between row counts).
struct ExpertWeights {
  Tensor gate, up, down;  // [E, F, D], [E, F, D], [E, D, F]
  Tensor dgate, dup, ddown;
};
struct ExpertRows {
  std::vector<std::int64_t> groups;  // rows per expert, spread evenly
  Tensor xp, g, u, h, o, d_o, dh, dg, du, dxp;
};

ExpertRows make_rows(std::int64_t rows, std::int64_t e, std::int64_t d, std::int64_t f, DType dtype) {
  ExpertRows r;
  for (std::int64_t j = 0; j < e; ++j) r.groups.push_back(rows / e + (j < rows % e ? 1 : 0));
  r.xp = filled(Shape{rows, d}, 0.1f, dtype);
  r.d_o = filled(Shape{rows, d}, 0.01f, dtype);
  for (Tensor* t : {&r.g, &r.u, &r.h, &r.dh, &r.dg, &r.du}) *t = filled(Shape{rows, f}, 0.05f, dtype);
  for (Tensor* t : {&r.o, &r.dxp}) *t = filled(Shape{rows, d}, 0.0f, dtype);
  return r;
}

// One pass of the experts as moe_mlp.cpp's experts_forward / experts_backward / backward_weight run it.
void run_pass(const ops::Context& ctx, const ExpertWeights& w, const ExpertRows& r, int pass) {
  ops::GroupedGemmOptions nt, nn, acc_nn, acc;
  nt.trans_b = true;
  acc_nn.beta = 1.0f;
  acc.beta = 1.0f;
  if (pass == 0) {
    ops::grouped_gemm(ctx, r.xp, w.gate, r.g, r.groups, nt);
    ops::grouped_gemm(ctx, r.xp, w.up, r.u, r.groups, nt);
    ops::swiglu_forward(ctx, r.g, r.u, r.h);
    ops::grouped_gemm(ctx, r.h, w.down, r.o, r.groups, nt);
  } else if (pass == 1) {
    ops::grouped_gemm(ctx, r.d_o, w.down, r.dh, r.groups, nn);
    ops::swiglu_backward(ctx, r.g, r.u, r.dh, r.dg, r.du);
    ops::grouped_gemm(ctx, r.dg, w.gate, r.dxp, r.groups, nn);
    ops::grouped_gemm(ctx, r.du, w.up, r.dxp, r.groups, acc_nn);
  } else {
    ops::grouped_gemm_weight_grad(ctx, r.dg, r.xp, w.dgate, r.groups, acc);
    ops::grouped_gemm_weight_grad(ctx, r.du, r.xp, w.dup, r.groups, acc);
    ops::grouped_gemm_weight_grad(ctx, r.d_o, r.h, w.ddown, r.groups, acc);
  }
}

// The fit of one block shard: per pass, the median time at each row count, then intercept and slope.
partition::MeasuredExpertRows measure_shard(const partition::BlockSpec& block, int tp, std::int64_t micro,
                                            const BlockProfileRequest& request, const ops::Context& ctx) {
  const std::int64_t e = block.n_experts, d = block.in_features, f = block.d_ff / tp;
  const DType dtype = request.precision == ops::Precision::kBf16 ? DType::kBF16 : DType::kF32;
  ExpertWeights w;
  w.gate = filled(Shape{e, f, d}, 0.02f, dtype);
  w.up = filled(Shape{e, f, d}, 0.02f, dtype);
  w.down = filled(Shape{e, d, f}, 0.02f, dtype);
  w.dgate = filled(Shape{e, f, d}, 0.0f, DType::kF32);
  w.dup = filled(Shape{e, f, d}, 0.0f, DType::kF32);
  w.ddown = filled(Shape{e, d, f}, 0.0f, DType::kF32);
  const std::int64_t mean_rows = micro * block.seq_len * block.top_k;
  partition::MeasuredExpertRows out;
  out.shape = partition::block_shape_key(block);
  out.tp = tp;
  out.rows = {mean_rows, 2 * mean_rows, 4 * mean_rows};
  std::vector<ExpertRows> levels;
  for (std::int64_t rows : out.rows) levels.push_back(make_rows(rows, e, d, f, dtype));
  std::array<std::vector<std::vector<double>>, 3> times;  // [pass][level] -> runs
  for (auto& pass : times) pass.resize(levels.size());
  for (std::size_t l = 0; l < levels.size(); ++l) {
    for (int pass = 0; pass < 3; ++pass) run_pass(ctx, w, levels[l], pass);  // untimed: first touch
  }
  for (int round = 0; round < request.rounds * request.repeats; ++round) {
    for (std::size_t l = 0; l < levels.size(); ++l) {  // alternated, so drift hits every level alike
      for (int pass = 0; pass < 3; ++pass) {
        const auto start = ProfileClock::now();
        run_pass(ctx, w, levels[l], pass);
        times[static_cast<std::size_t>(pass)][l].push_back(seconds_since(start));
      }
    }
  }
  const auto fit = fit_passes(std::vector<double>(out.rows.begin(), out.rows.end()), times);
  out.intercept = {fit[0].first, fit[1].first, fit[2].first};
  out.per_row = {fit[0].second, fit[1].second, fit[2].second};
  return out;
}

}  // namespace

std::pair<double, double> fit_intercept_slope(const std::vector<double>& x, const std::vector<double>& y) {
  CLEAVE_ASSERT(x.size() == y.size() && x.size() >= 2, "fit_intercept_slope: {} x and {} y values", x.size(), y.size());
  const double n = static_cast<double>(x.size());
  double sx = 0, sy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) sx += x[i], sy += y[i];
  const double mx = sx / n, my = sy / n;
  double sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) sxx += (x[i] - mx) * (x[i] - mx), sxy += (x[i] - mx) * (y[i] - my);
  CLEAVE_ASSERT(sxx > 0, "fit_intercept_slope: the x values are all {}", mx);
  const double b = std::max(0.0, sxy / sxx);
  if (my - b * mx >= 0) return {my - b * mx, b};
  // A negative intercept (noise on a steep line): the line through the origin, a = 0, b = Σxy / Σxx.
  double xy = 0, xx = 0;
  for (std::size_t i = 0; i < x.size(); ++i) xy += x[i] * y[i], xx += x[i] * x[i];
  return {0.0, std::max(0.0, xy / xx)};
}

std::vector<std::pair<double, double>> fit_passes(const std::vector<double>& x,
                                                  std::span<const std::vector<std::vector<double>>> times) {
  std::vector<std::pair<double, double>> fits;
  for (const auto& levels : times) {
    std::vector<double> y;
    for (const auto& runs : levels) y.push_back(upper_median(runs));
    fits.push_back(fit_intercept_slope(x, y));
  }
  return fits;
}

void measure_expert_rows(partition::MeasuredCosts& costs, const partition::ModelSpec& spec,
                         const BlockProfileRequest& request, comm::Communicator* comm) {
  CLEAVE_CHECK(!request.micro_batches.empty() && request.repeats >= 1 && request.rounds >= 1,
               "profile: expert rows need a micro-batch size, repeats and rounds");
  const std::int64_t micro = *std::min_element(request.micro_batches.begin(), request.micro_batches.end());
  const auto resources = ops::make_device_resources(Device::cpu());  // a run's CPU state: GEMM primitives kept
  ops::Context ctx;
  ctx.resources = resources.get();
  ctx.precision = request.precision;
  std::vector<partition::MeasuredExpertRows> measured;
  std::set<std::string> seen;
  for (int tp : request.tp_widths) {
    for (const auto& block : spec.blocks) {
      if (block.n_experts <= 0 || block.d_ff % tp != 0) continue;
      if (!seen.insert(partition::block_shape_key(block) + " tp" + std::to_string(tp)).second) continue;
      if (comm != nullptr) comm->barrier()->wait();  // every rank computes at once, as in training
      measured.push_back(measure_shard(block, tp, micro, request, ctx));
    }
  }
  std::vector<double> values;
  for (const auto& m : measured) {
    for (const partition::BlockTimes* t : {&m.intercept, &m.per_row}) {
      values.insert(values.end(), {t->forward_s, t->input_grad_s, t->weight_grad_s});
    }
  }
  mean_over_ranks(values, comm);
  for (std::size_t i = 0; i < measured.size(); ++i) {
    const double* v = &values[6 * i];
    measured[i].intercept = {v[0], v[1], v[2]};
    measured[i].per_row = {v[3], v[4], v[5]};
    costs.expert_rows.push_back(measured[i]);
  }
}

}  // namespace cleave::planner

// See host_routing_measure.hpp.
#include "engine/planner/host_routing_measure.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <set>
#include <utility>

#include "engine/core/error.hpp"
#include "engine/core/rng.hpp"
#include "engine/core/tensor.hpp"
#include "engine/planner/expert_rows_measure.hpp"
#include "engine/planner/stopwatch.hpp"
#include "layers/moe/router.hpp"

namespace cleave::planner {
namespace {

constexpr std::uint64_t kSeed = 20261130;  // fixed: two profiles route the same logits

// One level's inputs: N tokens' logits [N, E] (normal, std 1: a fresh router's spread) and weight gradients [N, k].
struct RoutingInputs {
  std::vector<float> logits, dweight;
};

RoutingInputs make_inputs(std::int64_t tokens, const layers::RouterOptions& router) {
  RoutingInputs in;
  in.logits.resize(static_cast<std::size_t>(tokens * router.experts));
  in.dweight.resize(static_cast<std::size_t>(tokens * router.top_k));
  rng::fill_normal(in.logits.data(), static_cast<std::int64_t>(in.logits.size()), kSeed, rng::hash_key("logits"), 0.0f,
                   1.0f);
  rng::fill_normal(in.dweight.data(), static_cast<std::int64_t>(in.dweight.size()), kSeed, rng::hash_key("dweight"),
                   0.0f, 1e-3f);
  return in;
}

// One pass of the host's routing as moe_mlp.cpp runs it: 0 the forward's route, 1 the backward's route and
// router_backward. Returns a value of the result so that nothing is optimised away.
double run_pass(const RoutingInputs& in, const layers::RouterOptions& router, int pass) {
  const layers::Routing routing = layers::route(in.logits, {}, router);
  if (pass == 0) return static_cast<double>(routing.counts.front());
  const std::vector<float> dlogits = layers::router_backward(routing, in.dweight, 1.0, router);
  return static_cast<double>(dlogits.front());
}

partition::MeasuredHostRouting measure_one(const layers::RouterOptions& router, std::int64_t tokens,
                                           const BlockProfileRequest& request) {
  partition::MeasuredHostRouting out;
  out.experts = router.experts;
  out.top_k = router.top_k;
  out.tokens = {tokens, 2 * tokens, 4 * tokens};
  std::vector<RoutingInputs> levels;
  for (std::int64_t n : out.tokens) levels.push_back(make_inputs(n, router));
  double sink = 0;
  for (const auto& level : levels) sink += run_pass(level, router, 0) + run_pass(level, router, 1);  // first touch
  std::array<std::vector<std::vector<double>>, 2> times;  // [pass][level] -> runs
  for (auto& pass : times) pass.resize(levels.size());
  for (int round = 0; round < request.rounds * request.repeats; ++round) {
    for (std::size_t l = 0; l < levels.size(); ++l) {  // alternated, so drift hits every level alike
      for (int pass = 0; pass < 2; ++pass) {
        const auto start = ProfileClock::now();
        sink += run_pass(levels[l], router, pass);
        times[static_cast<std::size_t>(pass)][l].push_back(seconds_since(start));
      }
    }
  }
  CLEAVE_CHECK(std::isfinite(sink), "profile: the timed routing's results are not finite ({})", sink);
  const auto fit = fit_passes(std::vector<double>(out.tokens.begin(), out.tokens.end()), times);
  out.intercept = {fit[0].first, fit[1].first, 0.0};
  out.per_token = {fit[0].second, fit[1].second, 0.0};
  return out;
}

}  // namespace

void measure_host_routing(partition::MeasuredCosts& costs, const partition::ModelSpec& spec,
                          const BlockProfileRequest& request, comm::Communicator* comm) {
  CLEAVE_CHECK(!request.micro_batches.empty() && request.repeats >= 1 && request.rounds >= 1,
               "profile: host routing needs a micro-batch size, repeats and rounds");
  const std::int64_t micro = *std::min_element(request.micro_batches.begin(), request.micro_batches.end());
  std::vector<partition::MeasuredHostRouting> measured;
  std::set<std::pair<std::int64_t, std::int64_t>> seen;
  for (const auto& block : spec.blocks) {
    if (block.n_experts <= 0 || !seen.insert({block.n_experts, block.top_k}).second) continue;
    layers::RouterOptions router;
    router.kind = spec.moe.router;
    router.experts = block.n_experts;
    router.top_k = block.top_k;
    router.normalize = spec.moe.normalize_top_k;
    router.aux_coef = spec.moe.aux_loss_coef;
    router.z_coef = spec.moe.z_loss_coef;
    if (comm != nullptr) comm->barrier()->wait();  // every rank computes at once, as in training
    measured.push_back(measure_one(router, micro * block.seq_len, request));
  }
  std::vector<double> values;
  for (const auto& m : measured) {
    for (const partition::BlockTimes* t : {&m.intercept, &m.per_token}) {
      values.insert(values.end(), {t->forward_s, t->input_grad_s});
    }
  }
  mean_over_ranks(values, comm);
  for (std::size_t i = 0; i < measured.size(); ++i) {
    const double* v = &values[4 * i];
    measured[i].intercept = {v[0], v[1], 0.0};
    measured[i].per_token = {v[2], v[3], 0.0};
    costs.host_routing.push_back(measured[i]);
  }
}

}  // namespace cleave::planner

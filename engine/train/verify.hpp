// Layout verification: train a configured layout and a single-rank reference from the same seed and
// compare per-step losses and the final logical parameters (`cleave verify`, and the equivalence tests).
//
// The reference runs inside world rank 0 on a communicator of its own, after the layout's run, so both
// use the same build, data and seed. Parameters are compared per tensor: max |layout - reference| over
// max |reference| of that tensor, which stays meaningful for tensors that start at zero (biases); under AdamW a
// slice whose gradient is zero in exact arithmetic is held to the update rule's bound instead (verify_compare.hpp).
// In bf16 on the CPU two more references, the twins, measure the noise floor of the run (the largest over the three
// pairs of the reference and twins, under AdamW no less than one step-1 sign flip), and in bf16 another, the
// precision twin (the reference in fp32), how far bf16's roundings move each tensor; in fp32 under AdamW on the CPU
// the order twins (the reference with each other GEMM library) how far reordering moves each tensor
// (verify_floor.hpp), and with the reference's own AdamW state how far that noise can move each element
// (verify_adamw_bound.hpp): a tensor also passes within a stated multiple of any of them.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <string>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/config/config.hpp"
#include "engine/run_plan/plan.hpp"
#include "engine/train/verify_adamw_bound.hpp"
#include "engine/train/verify_compare.hpp"
#include "engine/train/verify_floor.hpp"

namespace cleave::train {

struct VerifyOptions {
  double loss_tolerance = 1e-5;   // max relative difference of any step's loss
  double param_tolerance = 1e-3;  // max per-tensor normalised difference of the final parameters (AdamW: see --help)
  // bf16: a tensor also passes within this multiple x tp_rounding_factor(tp) of the twins' floor, or of its precision
  // twin's difference; fp32 AdamW: of its order twins' difference (verify_floor); 0: no twins
  double noise_multiple = 3;
};

// What a mixture-of-experts model routed in one step (StepStats::routing, summed over the world): tokens per expert,
// summed over the blocks and the global batch, and the blocks' mean load imbalance.
struct RoutingStep {
  std::vector<double> tokens;
  double imbalance = 0;
};

// The first step at which the layout routed otherwise than the reference.
struct RoutingDivergence {
  std::int64_t step = 0;   // 1-based
  std::int64_t moved = 0;  // tokens sent to another expert, at least (half the counts' total change; 1 at least)
  std::vector<double> layout, reference;  // tokens per expert at that step
  // One or two tokens moved: a router near-tie the layout's roundings tipped (kNearTieTokens)
  static constexpr std::int64_t kNearTieTokens = 2;
  bool near_tie() const { return moved <= kNearTieTokens; }
};

struct VerifyReport {
  std::vector<double> layout_losses;
  std::vector<double> reference_losses;
  std::vector<ParamDifference> params;  // sorted by name
  std::vector<NullSliceDifference> null_slices;  // AdamW: the slices held to the update rule's bound
  std::optional<NoiseFloor> floor;      // bf16 on the CPU: the twins' floor (params then carry `moved`)
  // bf16: the precision twin's per-tensor differences; fp32 AdamW on the CPU: the order twins' (`order` set)
  std::optional<RoundingFloor> rounding;
  // fp32 AdamW on the CPU: the per-element bound from the reference's AdamW state and the order twins' gradient noise
  // (verify_adamw_bound.hpp), and each tensor's verdict under it (a tensor passes on it when every element does)
  std::optional<ElementBound> element_bound;
  std::map<std::string, ElementCheck> element_checks;
  double max_loss_difference = 0;       // relative
  // bf16 AdamW: per step the largest relative loss difference of the twins and the precision twin from the reference
  // (0 at step 1, before any update), and the factor a layout's step is held to it by (losses_within)
  std::vector<double> loss_floor;
  double loss_floor_factor = 0;
  bool losses_within = false;           // every step within --loss-tolerance or the loss floor's tolerance
  double max_param_difference = 0;      // normalised
  bool params_within = false;           // every tensor within --param-tolerance or the floor's tolerance
  bool passed = false;                  // losses and tensors within, null slices within their bound (world rank 0)
  bool adamw = false;                   // the run's optimizer is AdamW (format_report's hint)
  bool routed = false;                  // a block routes each token to top_k of more experts (format_report's hint)
  // A moe model whose layout routed a step otherwise than the reference: past that step the two train different
  // experts on different tokens, so their differences say nothing of the layout's arithmetic (format_report)
  std::optional<RoutingDivergence> routing_diverged;
  bool routing_compared = false;        // both runs reported their routing (a model with routed blocks)
};

// The single-rank configuration equivalent to a resolved `config` (same model, data, seed, global and
// micro batch).
config::RunConfig single_rank_reference(const config::RunConfig& config);

// The default --loss-tolerance of a resolved config: 1e-5 in fp32; in bf16 u / sqrt(N) x tp_rounding_factor(tp),
// u = 2^-8 bf16's unit roundoff, N the tokens of a step (global batch x sequence length). A correct layout that sums
// an f32 value in another order (ring attention's merge, an f32 reduction) rounds it once to bf16 as one rank does:
// the two differ by the two roundings of nearly the same value, at most one ulp, about u relative, in scattered
// activations; the loss averages N per-token losses, so independent moves shift it by about u / sqrt(N) (measured:
// cp2 ring on examples/gpt_fortunes.json, N = 1024, 1.9e-5 after 10 SGD steps, the bound 1.2e-4). Tensor
// parallelism rounds more: each row-parallel output (and each column-parallel input gradient) is the bf16 sum of
// tp partials that were each rounded to bf16 first (the activation dtype, as Megatron all-reduces them), so it
// carries tp + 1 roundings where one rank's carries one (docs/multi-rank.md).
double default_loss_tolerance(const config::RunConfig& config);

// How many times u / sqrt(N) a layout of `tp_size` may move the loss: the rms of the independent roundings in the
// difference between its value and one rank's, in units of the two roundings of a reordered sum. tp 1: the layout's
// and the reference's rounding, 2, factor 1; tp t > 1: t partials, their sum and the reference's, t + 2 roundings
// each at most u of its term (the partials' sum of squares about the value's own when their signs are independent),
// factor sqrt((t + 2) / 2): sqrt(2) at tp 2, sqrt(3) at tp 4.
double tp_rounding_factor(int tp_size);

// The routing fields of a step (moe_tokens_e<i>, moe_load_imbalance; engine/train/router_metrics.hpp).
RoutingStep routing_of(std::span<const std::pair<std::string, double>> fields);

// The first step both runs hold whose routing differs (token counts per expert, or the load imbalance: equal counts
// summed over the blocks can hide a swap between blocks); nullopt when every step routed alike. A correct layout
// routes as one rank does unless its roundings move a router score across a near-tie (a token whose k-th and
// (k+1)-th scores are within rounding): then one or two tokens go elsewhere (RoutingDivergence::near_tie); more is
// a routing error, or a near-tie tipped earlier by an error elsewhere.
std::optional<RoutingDivergence> first_routing_divergence(const std::vector<RoutingStep>& layout,
                                                          const std::vector<RoutingStep>& reference);

// Per step |layout_i - reference_i| / |reference_i| over the steps both hold (a NaN: infinity).
std::vector<double> loss_differences(const std::vector<double>& layout, const std::vector<double>& reference);

// Per step the larger of `a` and `b` (the longer's length; a NaN wins).
std::vector<double> largest_per_step(std::vector<double> a, const std::vector<double>& b);

// Whether both hold the same steps and each step's relative difference is within `tolerance` or within `factor` x
// `floor` at that step (bf16 AdamW's loss floor; empty: none). Why the floor under AdamW in bf16: bf16 rounds the
// operands of every GEMM, and AdamW's update m / (sqrt(v) + eps) is scale-free, so an element whose gradient is within
// those roundings of zero takes a step up to lr in a direction the roundings choose; a layout rounds differently
// (its sums reordered, at tp t its t partials and their sum rounded too), so after step 1 its weights differ from
// one rank's by such steps, and the later losses follow the weights, not one rounding per token (u / sqrt(N) holds
// for step 1 only, and under SGD, whose step is linear in the gradient). The twins and the precision twin (the
// reference in fp32) undergo the same amplification of their own rounding differences, each step:
// |L_layout - L_ref| <= |L_layout - L_fp32| + |L_ref - L_fp32|, the layout as far from the fp32 run as the reference
// or at tp t sqrt(t + 1) times as far, in quadrature sqrt(t + 2) x |L_ref - L_fp32| = sqrt(2) x tp_rounding_factor;
// --noise-multiple (3) covers the sqrt(2) and the sample (docs/multi-rank.md, "bf16 under AdamW: the losses").
bool losses_within(const std::vector<double>& layout, const std::vector<double>& reference, double tolerance,
                   const std::vector<double>& floor, double factor);

// The largest |layout_i - reference_i| / |reference_i| over the steps both hold (a NaN: infinity): the loss
// difference verify holds to --loss-tolerance.
double max_loss_difference(const std::vector<double>& layout, const std::vector<double>& reference);

// Collective over `world`; the report is complete on world rank 0 (other ranks get the layout's losses).
// `layout_plan`: the layout's plan train::plan_before_world made of `config` at world.size() (`cleave verify`), taken
// instead of made again; without it the layout's trainer makes it.
VerifyReport verify_layout(const config::RunConfig& config, comm::Communicator& world, const VerifyOptions& options,
                           std::optional<run_plan::Plan> layout_plan = std::nullopt);

// Human-readable table of a report. With a floor: each tensor's difference as a fraction of its movement too, and
// the twin and its floor. A failure on the parameters alone, with the losses within tolerance, of an AdamW run
// without a floor ends with a line saying why that happens to correct layouts (AdamW turns the rounding noise of
// near-zero gradients into lr-sized steps) and how to check the layout instead (SGD).
std::string format_report(const VerifyReport& report, const VerifyOptions& options, std::size_t max_rows = 20);

}  // namespace cleave::train

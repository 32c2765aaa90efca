// `cleave verify`'s bf16 noise floor: how far apart two single-rank runs end that differ only in the order of sums
// a layout may change, measured on the run being verified, and the tolerance a layout is held to from it.
//
// In bf16 each GEMM, attention and norm output is an f32 sum rounded once to bf16 (unit roundoff 2^-8). A correct
// layout sums some of them in another order (ring attention's merge, tensor parallelism's partial sums), which moves
// scattered roundings by one bf16 ulp; AdamW divides each gradient by its own running rms, so on the many elements
// whose gradient is small against those moves it turns them into differences of a sizeable fraction of lr per step
// (a sign flip at step 1 is 2 lr). The size this reaches depends on the model, the data and the steps, so no fixed
// tolerance separates it from a bug; verify measures it instead. The twin is the single-rank reference with another
// CPU GEMM library (device.blas) and its bf16 attention reordered (DeviceConfig::attention_sums kReordered,
// kernels/ops/precision.hpp: the f32 kernel with the bf16 kernel's roundings of P and dS, as ring attention's blocks
// run, over key blocks half the kernel's, so each row's online softmax merges twice the partial blocks, as the ring
// merges its ranks'): the same values, every GEMM's and attention's f32 sums in another order before the same bf16
// roundings, which is what a layout does to its sums; and a second twin, the reference's own library with attention's
// key blocks quartered (kReorderedQuarters): another order again. (Attention never ran on device.blas's library: its
// kernel calls OpenBLAS for its block GEMMs and, in bf16, the dot instruction; and f32 sums of a few exact bf16
// products are often exact in any order. A twin that swapped the library alone left attention's bits as they were: on
// the default gpt its floor was 0.020 of movement under cp 2 ring's 0.069.)
// How far two such runs end apart under AdamW is mostly a count of discrete events: AdamW's first update is
// lr_1 x sign(g) in every element, so an element whose step-1 gradient is within rounding of zero ends 2 lr_1 apart
// in two equivalent runs or not at all, by chance (the default gpt's twin flipped one at 8 of 16 seeds; that was the
// floor's drop from 0.32 to 0.020: a flip at the default seed before, none after). So the rule has three parts
// (benchmarks/verify/RESULTS-2026-11-30-b-verify-floor.md): the flip is counted, not sampled: under AdamW the floor is
// no less than one step-1 flip as a fraction of an element's movement, 2 lr_1 / sum_s lr_s (adamw_flip_fraction);
// the rest is sampled three times, not once: the floor is the largest over every pair among the reference and its
// twins of each pair's largest difference as a fraction of how far training moved the tensor
// (ParamDifference::moved, pooled over tensors: per tensor it scatters 10x between two libraries; the pairs are not
// independent, both twins run attention's f32 path, but one pair's largest scattered 3.7x from another's on the
// same run); and at tp t each reduced value carries t + 2 roundings where a reordering's difference carries 2, so a
// layout's tensor passes within `multiple` x tp_rounding_factor(tp) x max(floor, flip) of its movement (the loss
// tolerance's factor). The twins' loss difference is reported beside the layout's, not used: --loss-tolerance
// (2^-8 / sqrt(tokens), x sqrt((tp + 2) / 2) at tp > 1: default_loss_tolerance) holds.
// Invariant: a twin differs from its reference only in the order of f32 sums (device.blas and device.attention_sums,
// nothing else in its config; attention's online softmax rescales its partial sums at other blocks, in f32), no two
// twins sum alike, and twins exist only in bf16 on the CPU.
//
// On small models the two libraries sum in nearly the same order (K fits one block), so the twin shows no floor
// while a layout's extra roundings still move tensors whose bf16 rounding of small values dominates (a tp 2 layout
// rounds each row-parallel partial and the sum; a bias starting at zero sums many such values that cancel). The
// precision twin measures that per tensor: the reference again in fp32 (nothing else differs) ends each tensor as
// far from the bf16 reference as bf16's roundings move it. A layout's bf16 run carries the reference's roundings
// reordered (as far from fp32 as the reference) or multiplied (at tp t, sqrt(t + 1) times as far), and
// |layout - reference| <= |layout - fp32| + |reference - fp32|: in quadrature sqrt(2) x tp_rounding_factor x
// |reference - fp32| per tensor; a tensor passes within `multiple` x tp_rounding_factor x its own precision-twin
// difference (RoundingFloor; docs/multi-rank.md).
//
// In fp32 under AdamW the order twins (order_twins: the reference with another GEMM library, or its micro-batches
// regrouped) give a per-tensor floor of the same shape (order_floor, a RoundingFloor with `order` set): AdamW turns a
// near-zero gradient's rounding into a step up to lr, which fp32's fixed tolerance cannot tell from a bug.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/config/config.hpp"
#include "engine/train/verify_compare.hpp"

namespace cleave::train {

// Two equivalent single-rank runs (the reference and a twin, or two twins) and how far apart they end.
struct FloorPair {
  std::string runs;    // "the reference and twin 1"
  double largest = 0;  // the largest `moved` difference over the compared tensors
  std::string worst;   // the tensor where it is
};

struct NoiseFloor {
  std::vector<std::string> twins;  // how each twin differs: "device.blas openblas instead of onednn and ..."
  std::vector<FloorPair> pairs;    // every pair among the reference and the twins
  double floor = 0;                // the pairs' largest `largest`
  std::string worst;               // the tensor where it is
  std::string pair;                // the pair where it is
  double loss = 0;                 // the twins' largest relative loss difference from the reference
  std::vector<double> step_losses; // per step, the twins' largest relative loss difference (bf16 AdamW's loss floor)
  // AdamW: one step-1 sign flip as a fraction of movement (adamw_flip_fraction); 0 under SGD
  double flip = 0;
  double multiple = 3;             // a layout's tensor passes within multiple x tp_factor x max(floor, flip)
  double tp_factor = 1;            // tp_rounding_factor of the layout's tp size
  double tolerance() const { return multiple * tp_factor * (std::isnan(floor) ? floor : std::max(floor, flip)); }
};

// The precision twin's differences: each tensor's max |fp32 reference - bf16 reference|, and the factor a layout's
// difference is held to: multiple x tp_rounding_factor(tp) of it.
struct RoundingFloor {
  std::string twin;                   // "device.precision fp32 instead of bf16"
  std::map<std::string, double> max_abs;  // per tensor
  double factor = 3;                  // a layout's tensor passes within factor x its max_abs
  double loss = 0;                    // the twin's largest relative loss difference
  // fp32 AdamW's order twins instead (order_twins): the column is "vs order twin" and the lines say why
  bool order = false;
  std::vector<double> step_losses;    // per step, the twin's relative loss difference (bf16 AdamW's loss floor)
  double tolerance(const std::string& name) const {
    auto it = max_abs.find(name);
    return it == max_abs.end() ? 0.0 : factor * it->second;
  }
};

// fp32 under AdamW: the order twins of a single-rank reference config, the same run with each other CPU GEMM
// library built (device.blas; nothing else differs), and with its micro-batches halved (doubled when odd, where the
// global batch allows; batch.micro_batch_size: the weight gradients' sums over tokens grouped as a dp or cp layout
// groups them; nothing else differs), none under SGD, in bf16 (twin_references and the precision twin
// hold there) or on cuda. AdamW's update m / (sqrt(v) + eps) is scale-free: an element whose gradient is near zero
// (rounding-level against its own size over the steps) takes steps up to lr whatever the gradient's size, so the
// order of a sum, which moves that gradient by rounding, moves the element by a sizeable fraction of lr. fp32's fixed
// --param-tolerance has no such floor (benchmarks/verify/RESULTS-2026-12-01-h-layout-sweep.md, draw 785). An order
// twin sums the same values in another order, as a layout does; per tensor, its largest difference from the reference
// measures how far reordering moves that tensor (a quiet tensor: ~1e-7 of scale; one with noise-dominated elements:
// up to lr x steps), and a layout's tensor passes within multiple x tp_rounding_factor(tp) x the largest over the
// twins (benchmarks/verify/RESULTS-2026-12-01-i-verify-floor.md). Per tensor, not pooled: a tensor the twins leave quiet keeps a bound
// of the twins' rounding, so half an AdamW step on one of its elements still fails.
std::vector<config::RunConfig> order_twins(const config::RunConfig& reference);

// The order floor of `pairs` (each order twin compared with the reference, and each two twins): per tensor the
// largest max_abs over the pairs, at `factor`.
RoundingFloor order_floor(std::span<const ParamComparison> pairs,
                          std::span<const std::string> described, double loss, double factor);

// The precision twin of a single-rank reference config: the same run in fp32. nullopt in fp32.
std::optional<config::RunConfig> precision_twin(const config::RunConfig& reference);

// The floor a precision twin's comparison against the reference shows, at `factor`.
RoundingFloor rounding_floor(const ParamComparison& twin_against_reference, double loss, double factor);

// The twins of a single-rank reference config: (1) the same run with another CPU GEMM library than the one the
// reference runs (onednn <-> openblas; blis -> openblas; openblas -> onednn, else blis) and attention_sums
// kReordered, (2) the reference's own library with attention_sums kReorderedQuarters. None in fp32 (its rounding is
// 2^-24 and --param-tolerance holds there; attention_sums changes nothing there either), on cuda (neither applies)
// and in a build with one library (on small models the library is most of what a twin reorders).
std::vector<config::RunConfig> twin_references(const config::RunConfig& reference);

// How `twin` differs from `reference` in words ("device.blas openblas instead of onednn and attention's sums
// reordered (f32 GEMM, key blocks halved)"; "attention's sums reordered (f32 GEMM, key blocks quartered)").
std::string describe_twin(const config::RunConfig& reference, const config::RunConfig& twin);

// One pair's largest difference: `compared` is compare_parameters of one run against the other with the initial
// values (so `moved` is filled).
FloorPair floor_pair(const ParamComparison& compared, std::string runs);

// Every pair among the reference and `twins` (their final parameters, in twin_references' order, all from `initial`):
// the reference against each twin, then each two twins, compared as a layout is (the null slices held apart).
std::vector<FloorPair> floor_pairs(const ParameterMap& reference, const ParameterMap& initial,
                                   std::span<const ParameterMap> twins,
                                   std::span<const partition::NullGradient> null_slices, double null_bound);

// AdamW's first update is lr_0 x sign(g) in every element (bias-corrected m / sqrt(v) is g / |g|), so an element whose
// step-1 gradient is within rounding of zero ends 2 lr_0 apart in two equivalent runs or not at all, by chance: one
// such flip as a fraction of the movement of an element that kept its sign, 2 lr_0 / sum_s lr_s (1 step: 2; the
// default gpt's warm-up, 3 steps: 1/3; 10 steps: 2/55). 0 under SGD, whose update is linear in the gradient.
double adamw_flip_fraction(const config::OptimizerConfig& optimizer, std::int64_t steps);

// The floor over `pairs` (the reference against each twin, and each two twins), with `loss`, the twins' largest
// relative loss difference from the reference, `flip` (adamw_flip_fraction of the run), at `multiple` x `tp_factor`.
NoiseFloor noise_floor(std::vector<FloorPair> pairs, double loss, std::vector<std::string> twins, double multiple,
                       double tp_factor, double flip = 0);

// Whether one tensor's difference passes: within `param_tolerance` of its scale (normalised, the fp32 rule), or,
// with a floor, within the floor's tolerance of its movement, or, with a rounding floor, within its tolerance of the
// tensor's own precision-twin difference. A NaN difference passes none. The floors are further ways to pass, not
// replacements: on small models the two GEMM libraries sum in nearly the same order (the twin of a d_model 32 gpt
// under SGD ends 7e-6 of a movement away, a correct cp 2 2e-5), so the fixed rule must still hold.
bool tensor_within(const ParamDifference& d, double param_tolerance, const NoiseFloor* floor,
                   const RoundingFloor* rounding = nullptr);

}  // namespace cleave::train

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
// roundings, which is what a layout does to its sums. (Attention never ran on device.blas's library: its kernel calls
// OpenBLAS for its block GEMMs and, in bf16, the dot instruction; and f32 sums of a few exact bf16 products are often
// exact in any order. A twin that swapped the library alone left attention's bits as they were: on the default gpt
// its floor was 0.020 of movement under cp 2 ring's 0.069.) The floor is the twin's largest difference from the reference
// as a fraction of how far training moved the tensor (ParamDifference::moved, pooled over tensors: per tensor it
// scatters 10x between two libraries); a layout's tensor passes within `multiple` x floor of its movement. The
// twin's loss difference is reported beside the layout's, not used: --loss-tolerance (2^-8 / sqrt(tokens),
// x sqrt((tp + 2) / 2) at tp > 1: default_loss_tolerance) holds.
// Invariant: a twin differs from its reference only in the order of f32 sums (device.blas and device.attention_sums,
// nothing else in its config; attention's online softmax rescales its partial sums at other blocks, in f32), and
// exists only in bf16 on the CPU.
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
#pragma once

#include <map>
#include <optional>
#include <string>

#include "engine/config/config.hpp"
#include "engine/train/verify_compare.hpp"

namespace cleave::train {

struct NoiseFloor {
  std::string twin;      // how the twin differs: "device.blas openblas instead of onednn"
  double floor = 0;      // the twin's largest `moved` difference from the reference over the compared tensors
  std::string worst;     // the tensor where it is
  double loss = 0;       // the twin's largest relative loss difference from the reference (reported only)
  double multiple = 3;   // a layout's tensor passes within multiple x floor of its movement
  double tolerance() const { return multiple * floor; }
};

// The precision twin's differences: each tensor's max |fp32 reference - bf16 reference|, and the factor a layout's
// difference is held to: multiple x tp_rounding_factor(tp) of it.
struct RoundingFloor {
  std::string twin;                   // "device.precision fp32 instead of bf16"
  std::map<std::string, double> max_abs;  // per tensor
  double factor = 3;                  // a layout's tensor passes within factor x its max_abs
  double loss = 0;                    // the twin's largest relative loss difference (reported only)
  double tolerance(const std::string& name) const {
    auto it = max_abs.find(name);
    return it == max_abs.end() ? 0.0 : factor * it->second;
  }
};

// The precision twin of a single-rank reference config: the same run in fp32. nullopt in fp32.
std::optional<config::RunConfig> precision_twin(const config::RunConfig& reference);

// The floor a precision twin's comparison against the reference shows, at `factor`.
RoundingFloor rounding_floor(const ParamComparison& twin_against_reference, double loss, double factor);

// The twin of a single-rank reference config: the same run with another CPU GEMM library than the one the reference
// runs (onednn <-> openblas; blis -> openblas; openblas -> onednn, else blis) and attention_sums kReordered. nullopt
// in fp32 (its rounding is 2^-24 and --param-tolerance holds there; attention_sums changes nothing there either), on
// cuda (neither applies) and in a build with one library.
std::optional<config::RunConfig> twin_reference(const config::RunConfig& reference);

// How `twin` differs from `reference` in words ("device.blas openblas instead of onednn and attention's sums
// reordered (f32 GEMM, key blocks halved)").
std::string describe_twin(const config::RunConfig& reference, const config::RunConfig& twin);

// The floor a twin's comparison against the reference shows (compare_parameters with the initial values), and
// `loss`, the twin's largest relative loss difference.
NoiseFloor noise_floor(const ParamComparison& twin_against_reference, double loss, std::string twin, double multiple);

// Whether one tensor's difference passes: within `param_tolerance` of its scale (normalised, the fp32 rule), or,
// with a floor, within the floor's tolerance of its movement, or, with a rounding floor, within its tolerance of the
// tensor's own precision-twin difference. A NaN difference passes none. The floors are further ways to pass, not
// replacements: on small models the two GEMM libraries sum in nearly the same order (the twin of a d_model 32 gpt
// under SGD ends 7e-6 of a movement away, a correct cp 2 2e-5), so the fixed rule must still hold.
bool tensor_within(const ParamDifference& d, double param_tolerance, const NoiseFloor* floor,
                   const RoundingFloor* rounding = nullptr);

}  // namespace cleave::train

// `cleave verify`'s bf16 noise floor: how far apart two single-rank runs end that differ only in the order of sums
// a layout may change, measured on the run being verified, and the tolerance a layout is held to from it.
//
// In bf16 each GEMM, attention and norm output is an f32 sum rounded once to bf16 (unit roundoff 2^-8). A correct
// layout sums some of them in another order (ring attention's merge, tensor parallelism's partial sums), which moves
// scattered roundings by one bf16 ulp; AdamW divides each gradient by its own running rms, so on the many elements
// whose gradient is small against those moves it turns them into differences of a sizeable fraction of lr per step
// (a sign flip at step 1 is 2 lr). The size this reaches depends on the model, the data and the steps, so no fixed
// tolerance separates it from a bug; verify measures it instead. The twin is the single-rank reference with another
// CPU GEMM library (device.blas): the same values, every GEMM's f32 sum in another order before the same bf16
// roundings, which is what a layout does to its sums. The floor is the twin's largest difference from the reference
// as a fraction of how far training moved the tensor (ParamDifference::moved, pooled over tensors: per tensor it
// scatters 10x between two libraries); a layout's tensor passes within `multiple` x floor of its movement. The
// twin's loss difference is reported beside the layout's, not used: --loss-tolerance (2^-8 / sqrt(tokens),
// x sqrt((tp + 2) / 2) at tp > 1: default_loss_tolerance) holds.
// Invariant: a twin differs from its reference in device.blas only, and only in bf16 on the CPU.
#pragma once

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

// The twin of a single-rank reference config: the same run with another CPU GEMM library than the one the reference
// runs (onednn <-> openblas; blis -> openblas; openblas -> onednn, else blis). nullopt in fp32 (its rounding is
// 2^-24 and --param-tolerance holds there), on cuda (device.blas does not apply) and in a build with one library.
std::optional<config::RunConfig> twin_reference(const config::RunConfig& reference);

// How `twin` differs from `reference` in words ("device.blas openblas instead of onednn").
std::string describe_twin(const config::RunConfig& reference, const config::RunConfig& twin);

// The floor a twin's comparison against the reference shows (compare_parameters with the initial values), and
// `loss`, the twin's largest relative loss difference.
NoiseFloor noise_floor(const ParamComparison& twin_against_reference, double loss, std::string twin, double multiple);

// Whether one tensor's difference passes: within `param_tolerance` of its scale (normalised, the fp32 rule), or,
// with a floor, within the floor's tolerance of its movement. A NaN difference passes neither. The floor is a second
// way to pass, not a replacement: on small models the two GEMM libraries sum in nearly the same order (the twin of
// a d_model 32 gpt under SGD ends 7e-6 of a movement away, a correct cp 2 2e-5), so the fixed rule must still hold.
bool tensor_within(const ParamDifference& d, double param_tolerance, const NoiseFloor* floor);

}  // namespace cleave::train

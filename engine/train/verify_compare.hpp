// `cleave verify`'s comparison of final parameters (layout against one rank), as pure functions of the two
// gathered parameter maps.
//
// Every tensor is compared by its normalised difference: max |layout - reference| / max |reference| over its
// elements. The exception is a slice whose gradient is zero in exact arithmetic (partition::NullGradient: gpt's
// attention key bias) when the optimizer is AdamW: both runs feed it rounding noise only, which AdamW divides by
// sqrt(v) + eps and so turns into steps of up to lr whatever the noise's size; the final values there carry no
// information a layout could get right or wrong. Such a slice leaves the normalised comparison (of its tensor too)
// and is held instead to the update rule's bound (adamw_drift_bound), which any two AdamW runs meet and a broken
// update (a non-finite value, a step applied twice) does not. SGD keeps every element in the normalised comparison:
// it moves a noise gradient by lr times the noise.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "engine/config/config.hpp"
#include "partition/families/family.hpp"

namespace cleave::train {

using ParameterMap = std::map<std::string, std::vector<float>>;  // logical name -> logical values

struct ParamDifference {
  std::string name;
  std::int64_t numel = 0;
  double max_abs = 0;     // max |layout - reference| over the compared elements (every element but null slices)
  double normalised = 0;  // max_abs / max |reference| over the same elements (0 when both are exactly equal)
  // max_abs / max |reference - initial| over the same elements: the difference as a fraction of how far training
  // moved the tensor (compare_parameters with initial values; 0 without them, or when both are exactly equal)
  double moved = 0;
};

// A null-gradient slice held to the update rule's bound instead of the normalised comparison.
struct NullSliceDifference {
  partition::NullGradient slice;
  double max_abs = 0;  // max |layout - reference| over the slice
  double bound = 0;    // adamw_drift_bound of the run
  bool within() const { return max_abs <= bound; }  // false for NaN
};

struct ParamComparison {
  std::vector<ParamDifference> params;           // by name
  std::vector<NullSliceDifference> null_slices;  // in the order given
  double max_param_difference = 0;               // over params (infinity when a name or size differs)
  bool same_names = true;                        // both maps hold the same names with the same sizes
};

// Bias-corrected Adam's largest |m_hat / (sqrt(v_hat) + eps)| at its step t >= 1, over every gradient sequence:
// by Cauchy-Schwarz, (1 - beta1) / (1 - beta1^t) * sqrt((1 - beta2^t) / (1 - beta2)) * sqrt(sum_{j<t} (beta1^2 /
// beta2)^j); 1 at t = 1 (and 1.003 at t = 3 for betas 0.9, 0.999, 7.3 as t grows).
double adamw_step_bound(double beta1, double beta2, std::int64_t t);

// The most two AdamW runs from the same initial value can differ in one element after `steps` steps, whatever
// their gradients: 2 * sum_s lr_s * max_{t <= s+1} adamw_step_bound(t), lr_s the schedule's rate of step s.
// Decoupled weight decay multiplies the difference by 1 - lr * wd, which cannot grow it.
double adamw_drift_bound(const config::OptimizerConfig& optimizer, std::int64_t steps);

// The comparison of `layout` against `reference`, with `null_slices` (their parameters present in `reference`, the
// ranges inside them) taken out of the normalised comparison and held to `null_bound`. Pass none to compare
// every element. With `initial` (the reference's values before its first step, same names and sizes) each
// difference's `moved` is filled too.
ParamComparison compare_parameters(const ParameterMap& layout, const ParameterMap& reference,
                                   std::span<const partition::NullGradient> null_slices, double null_bound,
                                   const ParameterMap* initial = nullptr);

// The slices `cleave verify` holds to the bound for `config`: the model's null gradients under AdamW, none
// under SGD.
std::vector<partition::NullGradient> verify_null_slices(const config::RunConfig& config);

}  // namespace cleave::train

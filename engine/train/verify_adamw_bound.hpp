// `cleave verify`'s per-element bound in fp32 under AdamW: how far gradient-order noise can move each element of a
// tensor, from the reference's own optimizer state, so a correct layout that flips a noise-dominated element no order
// twin flipped still passes, and an element whose gradient is signal keeps a bound of rounding size.
//
// AdamW's update of one element at step s is lr_s m̂_s / (sqrt(v̂_s) + eps). Two equivalent runs feed it gradients
// g_j and g_j + δ_j (the order of sums moves δ_j by rounding; later, the runs' small parameter differences move it
// too). To first order the update moves by at most lr_s σ (1 + B_s sqrt(s)) / (sqrt(v̂_s) + eps) when every |δ_j|
// <= σ: the m term's weights (1 - β1) β1^(s-j) / (1 - β1^s) sum to 1, and the v term, lr_s m̂ / (sqrt(v̂) (sqrt(v̂) +
// eps)^2) x (1 - β2) β2^(s-j) |g_j| / (1 - β2^s) per δ_j, is at most lr_s B_s sqrt(w_j) / (sqrt(v̂) + eps) with w_j =
// (1 - β2) β2^(s-j) / (1 - β2^s) (since v̂ >= w_j g_j^2 and |m̂| / (sqrt(v̂) + eps) <= B_s, adamw_step_bound), whose
// sum over j <= s is at most sqrt(s) (Cauchy-Schwarz, Σ w_j <= 1). Summed over the steps the element's difference is
// at most σ S_i, S_i = Σ_s lr_s (1 + B_s sqrt(s)) / (sqrt(v̂_{i,s}) + eps) (adamw_sensitivity: the reference's v after
// each step), and never more than the drift bound any two AdamW runs meet, 2 Σ_s lr_s B_s (adamw_drift_bound). So an
// element whose gradient is near zero (small v̂) may move up to lr per step, and one whose gradient is large moves
// σ / |g| of a step.
//
// σ, the gradient-order noise, is observed per tensor: each pair among the reference and the order twins (equivalent
// runs, the same sums in other orders) ends element i |a_i - b_i| apart, which needs noise of at least |a_i - b_i| /
// S_i; the tensor's σ is the largest such value over its elements and pairs (gradient_noise). The rounding of a sum
// scales with its terms, not with its result, so one σ per tensor covers its noise-dominated elements as well as its
// signal ones; a tensor the twins leave identical has σ 0 and gets nothing from this bound. A layout's element i
// passes within min(drift bound, multiple x tp_rounding_factor(tp) x σ x S_i), the order floor's factor (a tp t
// layout rounds a reduced value t + 2 times where a reordering rounds it twice; 3 is the margin for a sampled σ), or
// within the tensor's own tolerances (--param-tolerance of its scale, the order floor): element_check.
// Invariant: pure functions of gathered logical maps (names and sizes as gather_parameters gives them); a NaN
// difference passes nothing.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>

#include "engine/config/config.hpp"
#include "engine/train/verify_compare.hpp"

namespace cleave::train {

// Adds step `step`'s (0-based) term lr_s (1 + B_{s+1} sqrt(s + 1)) / (sqrt(v̂) + eps) to `sensitivity` for every
// element of `exp_avg_sq` (AdamW's v after that step's update, not bias-corrected, by parameter name). A name new to
// `sensitivity` starts at zero; a size mismatch is an assertion.
void add_adamw_sensitivity(ParameterMap& sensitivity, const ParameterMap& exp_avg_sq,
                           const config::OptimizerConfig& optimizer, std::int64_t steps, std::int64_t step);

// Per tensor, the smallest gradient noise σ that explains every pair's differences: max over `pairs` (each two
// equivalent runs' final parameters) and the compared elements (not in `null_slices`) of |a_i - b_i| / S_i. An
// element with S_i 0 and a difference gives infinity (the twins moved an element AdamW never stepped: no bound from
// this); a NaN difference gives NaN.
std::map<std::string, double> gradient_noise(std::span<const std::pair<const ParameterMap*, const ParameterMap*>> pairs,
                                             const ParameterMap& sensitivity,
                                             std::span<const partition::NullGradient> null_slices);

// The per-element verdict on one tensor.
struct ElementCheck {
  std::string name;
  double ratio = 0;         // max_i |layout_i - reference_i| / allowed_i (> 1: the tensor fails this rule)
  std::int64_t worst = -1;  // the element where it is
  double difference = 0;    // |layout - reference| there
  double allowed = 0;       // allowed_i there
  bool within() const { return ratio <= 1; }  // false for NaN
};

// The per-element bound of a run: σ per tensor, S per element, the factor and the cap.
struct ElementBound {
  std::map<std::string, double> noise;  // gradient_noise
  ParameterMap sensitivity;             // S_i (add_adamw_sensitivity over the reference's steps)
  double factor = 3;                    // multiple x tp_rounding_factor(tp)
  double cap = 0;                       // adamw_drift_bound of the run
  // allowed_i = max(tensor_tolerance, min(cap, factor x σ x S_i))
  double allowed(const std::string& name, std::size_t i, double tensor_tolerance) const;
};

// Each element of tensor `name` of `layout` against `reference` (null-slice elements skipped) within
// bound.allowed(name, i, tensor_tolerance); `tensor_tolerance` is the absolute difference the tensor rules already
// allow every element (--param-tolerance x max |reference|, the order floor's tolerance: their larger).
ElementCheck element_check(const std::string& name, const ParameterMap& layout, const ParameterMap& reference,
                           const ElementBound& bound, double tensor_tolerance,
                           std::span<const partition::NullGradient> null_slices);

}  // namespace cleave::train

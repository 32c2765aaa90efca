// AttentionRates: a fused attention kernel's published speed by pass, mask, head dimension and sequence length (profile
// key attention_rates; docs/planner.md, "Attention kernels by pass"). Each curve is one chart of a kernel benchmark
// (FlashAttention-3's H100 figures: forward and backward, FA2 / FA3 / cuDNN / Triton, head dim 64 and 128, sequence
// 512 to 16k): TFLOP/s counted as those papers count them (forward 4·T²·d per head, halved under the causal mask;
// backward 2.5 times the forward, the recomputed scores included), which is how work_parts::attention_forward /
// _backward count the fused kernel's products. Between two tabulated sequence lengths the rate is interpolated in
// log T; past either end it is that end's rate (flat). A curve's mask is "none", "causal" or "any": "any" stands for
// both, for a benchmark that publishes one setting only (its source must say so).
// Invariant: every curve has a kernel name, a pass, a mask, a head dimension > 0 and at least one point, its sequence
// lengths strictly increasing and its rates > 0; no two curves share (kernel, pass, mask, head dim); a lookup with
// no curve for its (kernel, pass, mask, head dim) throws naming what is missing and what the table has; the pricing
// lookup (flops_per_s_between_head_dims) interpolates a head dim between two published ones and refuses the rest.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace cleave::partition {

// Which pass of the fused attention kernel a product belongs to (Gemm::attention_pass).
enum class AttentionPass { kNone, kForward, kBackward };

// The mask a curve was measured under; kAny stands for both, for a benchmark that publishes one setting only.
enum class AttentionMask { kNone, kCausal, kAny };

class AttentionRates {
 public:
  struct Curve {
    std::string kernel;    // "cudnn", "flash3", "flash2", "triton": the run option --attention-kernel names it
    AttentionPass pass = AttentionPass::kForward;
    AttentionMask mask = AttentionMask::kNone;
    int head_dim = 0;
    std::vector<std::pair<double, double>> points;  // (sequence length, TFLOP/s), sequence ascending
  };
  AttentionRates() = default;
  // Validates the curves (see the invariant); throws Error naming `where` and the bad curve.
  AttentionRates(std::vector<Curve> curves, const std::string& where);

  bool empty() const { return curves_.empty(); }
  const std::vector<Curve>& curves() const { return curves_; }
  bool has_kernel(const std::string& kernel) const;
  // The kernel's FLOP/s (not tera) for one pass at (causal, head_dim, seq_len): the curve for exactly this kernel,
  // pass and head dim whose mask is the asked one, else "any"; throws Error naming the kernel, pass, mask and head dim
  // when the table has none (an incomplete table is refused, never filled from another kernel or head dim).
  double flops_per_s(const std::string& kernel, AttentionPass pass, bool causal, double head_dim, double seq_len) const;
  // What the cost model reads (HardwareProfile): at a head dim the benchmark did not run but that lies between two it
  // did, each head's time (d / rate, per 4·T² of work) linear in d between the nearest published head dims below and
  // above, at the same sequence length. Its two parts are a cost per score (an unfused path's [T, T] matrices written
  // and read, a fused kernel's exp, max and rescaling: the same at any d) and a cost per product FLOP (proportional to
  // d); the published curves at the two head dims fix both. A tabulated head dim is its curve (flops_per_s); one
  // outside the published range is refused by name as flops_per_s refuses it (nothing is extrapolated).
  double flops_per_s_between_head_dims(const std::string& kernel, AttentionPass pass, bool causal, double head_dim,
                                       double seq_len) const;

 private:
  // The curve for (kernel, pass, head dim) with the asked mask, else mask "any"; nullptr when the table has none.
  const Curve* find(const std::string& kernel, AttentionPass pass, bool causal, double head_dim) const;
  std::vector<Curve> curves_;
  std::string where_;
};

std::string_view attention_pass_name(AttentionPass pass);
std::string_view attention_mask_name(AttentionMask mask);  // the file form: "none", "causal", "any"
// The file form: [{"kernel", "pass", "mask", "head_dim", "tflops_by_seq": [[T, TFLOP/s], ...]}, ...].
AttentionRates attention_rates_from_json(const nlohmann::json& list, const std::string& where);
nlohmann::json attention_rates_to_json(const AttentionRates& rates);

}  // namespace cleave::partition

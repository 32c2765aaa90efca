// The moe family below the layers (Mixtral, Qwen3-MoE, DeepSeek-style routers): a llama (RMSNorm, rotary
// grouped-query attention, no biases) whose feed-forward is a mixture of experts. Its config keys (model.* for
// model.type "moe": every llama key plus the router's), their defaults and checks, its block list, its
// tensor-parallel rules, and the moe block's costs (moe_block.cpp). Layer builder: layers/families/moe.cpp
// (layers/moe/); config fields: engine/config/fields.hpp kMoeFields.
//
// The feed-forward of each block: a router (a [E, D] linear, no bias) scores the E experts for every token
// and picks k of them; each expert is a SwiGLU of width ffn_hidden_size (gate, up: D -> F; down: F -> D);
// the token's output is the weighted sum of its k experts' outputs, plus the shared experts' (a SwiGLU of
// width n_shared_experts * F every token goes through, unweighted; with shared_expert_gate scaled per token by
// sigmoid(x · w_gate), a [1, D] linear: Qwen2-MoE's shared_expert_gate) when n_shared_experts > 0. Dropless: no
// capacity, every token reaches its k experts.
//
// Routers (model.router):
//   "softmax": p = softmax(logits) over the E experts; the k largest p are chosen (ties: the lower expert
//              index); weights p of the chosen, divided by their sum when normalize_top_k (Mixtral's form).
//   "sigmoid": s = sigmoid(logits); the k largest s + bias are chosen (bias: a per-expert vector used for the
//              choice only, DeepSeek-V3's auxiliary-loss-free balancing, moved by bias_update_rate per step
//              against the load); weights s of the chosen, normalised as above when normalize_top_k.
// Losses added to the model's (their gradients scaled as the main loss's, per micro-batch):
//   aux_loss_coef a: a · E · Σ_e f_e · P_e (Switch / Mixtral), f_e the fraction of the micro-batch's N·k
//              assignments that went to e, P_e the mean over tokens of p_e (sigmoid: s_e / Σ s).
//   z_loss_coef  z: z · mean over tokens of logsumexp(logits)² (ST-MoE).
//
// Block order: as llama's, with moe blocks in place of llama blocks (names "blocks.<i>").
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/core/dtype.hpp"
#include "engine/core/enum_names.hpp"
#include "partition/families/llama.hpp"

namespace cleave::partition {

struct ModelSpec;
struct BlockSpec;
enum class Recompute;  // partition/cost_model.hpp
struct Family;
struct BlockRules;

// The router kinds model.router names (see "Routers" above).
enum class RouterKind { kSoftmax, kSigmoid };
constexpr std::array<EnumName<RouterKind>, 2> enum_names(RouterKind) {
  return {{{RouterKind::kSoftmax, "softmax"}, {RouterKind::kSigmoid, "sigmoid"}}};
}
// The refusal of an unknown model.router (parse_enum): the kinds there are and the models that use each.
std::string enum_refusal(RouterKind, std::string_view text);

// The llama keys (ffn_hidden_size: each expert's SwiGLU width) and the mixture's.
struct MoeConfig : LlamaConfig {
  std::int64_t n_experts = 4;         // E routed experts per block
  std::int64_t top_k = 2;             // experts per token (<= n_experts)
  std::int64_t n_shared_experts = 0;  // always-on experts (one SwiGLU of n_shared_experts x ffn_hidden_size)
  bool shared_expert_gate = false;    // the shared experts' output scaled by sigmoid(x · w), w [1, D] (Qwen2-MoE)
  RouterKind router = RouterKind::kSoftmax;
  bool normalize_top_k = true;        // the k weights divided by their sum
  double aux_loss_coef = 0.01;        // load-balancing loss (0: off)
  double z_loss_coef = 0.0;           // router z-loss (0: off)
  double bias_update_rate = 0.001;    // sigmoid router: the selection bias's step per optimizer step
  // Test and benchmark only (benchmarks/moe/): a named routing workload that overrides the router's choice of
  // experts ("": the router chooses). See ForcedRouting.
  std::string forced_routing;
};

// model.forced_routing: the k experts of token n (of its micro-batch; n < micro_batch_size · seq_len / cp) in
// slot j at optimizer step s (0-based, the trainer's) are a pure function of (s, n, j), so the imbalance
// benchmark's oracle (benchmarks/moe/oracle.py) computes every rank's rows independently. With
// h = splitmix64((s << 40) ^ (n << 8) ^ j):
//   "uniform"      h mod E                    "zipf"        the expert where h mod W falls, weights 2^20 / (e+1)
//   "one_expert"   expert j (all rows to experts 0..k-1)   "moving_hot"  slot 0: s mod E; others h mod E
//   "empty_rank:P" h mod (E - E/P): the last E/P experts never chosen (one empty rank at ep = P; "empty_rank": P 2)
// A candidate an earlier slot took moves to the next expert (wrapping within the workload's range). The weights
// stay the router's (its scores of the forced experts, normalised as configured), so training and the router's
// gradients run as usual. The router's own choice is ignored: not for real training (docs/models.md).
struct ForcedRouting {
  enum class Kind { kNone, kUniform, kZipf, kOneExpert, kEmptyRank, kMovingHot };
  Kind kind = Kind::kNone;
  std::int64_t parts = 2;  // empty_rank: the last n_experts / parts experts stay empty
};
// Throws ConfigKeyError naming model.forced_routing, the workloads there are and the sizes at fault.
ForcedRouting forced_routing(const std::string& text, std::int64_t n_experts, std::int64_t top_k);

// `config` with llama's defaults resolved (n_kv_heads, ffn_hidden_size).
MoeConfig moe_defaults(MoeConfig config);

// Checks the sizes (ConfigKeyError naming model.<key> and the numbers) and builds the block list.
ModelSpec make_moe_spec(const MoeConfig& config);

// The sigmoid router's bias moves after every optimizer step on every rank that holds its block, which needs it
// whole; optimizer.zero_stage 3 over dp × cp > 1 ranks keeps only shards of every parameter between steps. Throws
// ConfigKeyError naming model.bias_update_rate for that pair (a rate of 0 or one replica passes). Run when dp is
// known (RunConfig::resolve), so the planner drops such candidates too.
void check_bias_update_sharding(const MoeConfig& config, int zero_stage, std::int64_t dp, std::int64_t cp);

// The family's rows in the tables of family.hpp.
Family moe_family();
BlockRules moe_block_rules();  // moe_block.cpp

// A moe block's input-gradient rise per sample on one tp rank, by phase (moe_block.cpp; its cost's
// backward_extra_bytes is the larger): `dense`, the attention's (llama's), and `mixture`, MoeMlp::backward_input's
// at ep 1 on its T·k routed rows (the shared experts' SwiGLU on top of it). Expert parallelism re-costs the mixture
// on the rows a rank receives (partition/ep_costs.hpp).
struct MoeBackwardPhases {
  std::int64_t dense = 0, mixture = 0;
};
MoeBackwardPhases moe_backward_phases(const BlockSpec& block, DType dtype, Recompute recompute, int tp,
                                      bool sequence_parallel);

// The routed experts' kernels of one moe block for a micro-batch of `micro_batch` samples on one tp rank, as the
// engine runs them (layers/moe/moe_mlp.cpp): each projection (gate, up: D -> F/tp; down: F/tp -> D) a grouped GEMM,
// one GEMM per expert (ops::grouped_gemm; on CUDA one launch each), so E launches of about micro · T · k / E rows
// each (the mean an expert receives) rather than one GEMM of micro · T rows k · F wide: a profile's efficiency curve
// prices each launch at its own, smaller size (HardwareProfile::gemm_seconds, Gemm::groups). The SwiGLU between
// them runs over all the routed rows. Under expert parallelism the busiest rank runs the same E GEMMs (its E / ep
// experts, one GEMM per source rank each: moe_mlp.cpp blocks_of), each `imbalance` times the mean rows (the ep
// imbalance, docs/planner.md "Expert parallelism"); 1 at ep 1. The passes' GEMM FLOPs are the cost model's for the
// routed experts (3 GEMMs of 2 · T · k · D · F / tp per sample and pass) times micro_batch · imbalance.
BlockWork moe_routed_expert_work(const BlockSpec& block, DType dtype, int tp, std::int64_t micro_batch,
                                 double imbalance = 1.0);

// The routing's memory-bound kernels of one moe block for a micro-batch of `micro_batch` samples (the same on every
// tp rank: each routes every token, the rows D wide), as layers/moe/moe_mlp.cpp launches them, one kernel each, over
// n = micro · T tokens, r = n · k routed rows, b bytes an activation element and 4-byte indices and weights:
//   F  moe_gather x -> xp: reads r rows of x and the row->token index, writes xp: 2·r·D·b + 4r
//      moe_combine o -> y: reads o, the token->row table and the weights [n, k], writes y: r·D·b + n·D·b + 8r
//   I  moe_combine_weight_grad: reads dy, o and the token->row table, writes dweight [n, k] f32: n·D·b + r·D·b + 8r
//      moe_gather dy -> d_o, scaled by the row weights: reads r rows of dy, the index and the weights, writes d_o:
//      2·r·D·b + 8r
//      moe_combine dxp -> dx (unweighted): reads dxp and the table, writes dx: r·D·b + n·D·b + 4r
//      the logits' gradient cast from the host's f32 to the compute dtype (ops::copy): n·E·(4 + b)
// No GEMMs: the router's GEMM and its softmax / top-k traffic are moe_work's own. Not counted: the host's routing
// itself (route(), router_backward on the host) and the host-device copies of the logits, the routing tables and
// the logits' gradient (no profile has a host link), nor the tables' bytes under expert parallelism, where the same
// kernels run on this rank's own tokens (the all-to-alls move the rows: partition/ep_costs.hpp).
BlockWork moe_routing_work(const BlockSpec& block, DType dtype, std::int64_t micro_batch);

}  // namespace cleave::partition

// The mixture-of-experts router's arithmetic, on the host: from the router logits of N tokens over E experts to
// each token's k experts and weights, the routed-row layout (tokens grouped per expert), the auxiliary losses,
// and back from the weights' gradient to the logits' gradient. Pure functions of their arguments (no devices,
// no state), so the layer (moe_mlp.hpp) and the tests' double reference share one definition of routing.
//
// Routing (partition/families/moe.hpp has the user's view):
//   softmax: p = softmax(logits); chosen: the k largest p; weight_j = p_j (/ Σ_chosen p when normalize).
//   sigmoid: s = sigmoid(logits); chosen: the k largest s + bias; weight_j = s_j (/ Σ_chosen s when normalize).
//   Ties are broken by the LOWER expert index (a stable order: score descending, then index ascending). A
//   token's k slots are then listed by expert index ascending (not by score), so the combine (moe_combine: a
//   token's slots summed in slot order, f32) sums by token, then by expert index; normalising sums the chosen
//   scores in selection order.
// Routed rows: R = N·k rows, expert 0's tokens first, then expert 1's, ...; within an expert, tokens ascending.
// Losses of one call (one micro-batch), with f_e = count_e / (N·k) and P_e = mean over tokens of q_e, q = p
// (softmax) or s / Σ_e s (sigmoid):
//   aux = aux_coef · E · Σ_e f_e · P_e (f_e is a constant: counts have no gradient);
//   z   = z_coef · mean over tokens of logsumexp(logits)².
// A micro-batch is the unit of both: under context parallelism a rank routes only its part of each sequence, so
// f_e must come from the whole micro-batch's counts (balance_over); P_e and z stay this rank's means, whose average
// over the cp ranks (equal token counts, each rank's gradient scaled by 1 / cp) is the whole micro-batch's.
// Arithmetic is double; what is handed back is rounded to f32.
// The layer routes every micro-batch twice (forward and backward) and keeps one Routing and one RouterWorkspace
// from call to call: route_into and router_backward_into refill them in place (every field rewritten), so once
// their vectors have held a micro-batch's sizes a step allocates nothing; route and router_backward are the same
// arithmetic into fresh ones.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "partition/families/moe.hpp"

namespace cleave::layers {

struct RouterOptions {
  partition::RouterKind kind = partition::RouterKind::kSoftmax;
  std::int64_t experts = 0;
  std::int64_t top_k = 0;
  bool normalize = true;
  double aux_coef = 0.0;
  double z_coef = 0.0;
  double bias_update_rate = 0.0;  // sigmoid: the selection bias's step per optimizer step (router_log.hpp)
  partition::ForcedRouting forced;  // model.forced_routing (test/benchmark only; forced_routing.hpp)
};

struct Routing {
  std::int64_t tokens = 0, experts = 0, top_k = 0;
  std::vector<std::int32_t> expert;       // [N·k] the expert of token n's slot j
  std::vector<float> weight;              // [N·k] its routing weight
  std::vector<std::int64_t> counts;       // [E] tokens per expert (the grouped GEMMs' groups)
  std::vector<std::int32_t> row_token;    // [R] the token of routed row r
  std::vector<std::int32_t> token_row;    // [N·k] the routed row of token n's slot j
  std::vector<float> row_weight;          // [R] the weight of routed row r
  std::vector<double> scores;             // [N·E] p (softmax) or s (sigmoid)
  std::vector<double> lse;                // [N] logsumexp of each token's logits
  std::vector<float> logits;              // [N·E] the logits routed
  std::vector<double> mean_q;             // [E] P_e: the mean over the tokens of q_e
  // The aux loss's f_e = balance_counts_e / (balance_tokens · k): this call's counts and tokens unless
  // balance_over gave the whole micro-batch's.
  std::vector<std::int64_t> balance_counts;  // [E]
  std::int64_t balance_tokens = 0;
  double aux_loss = 0.0;                  // coefficient included
  double z_loss = 0.0;
};

// logits [N·E] row-major; bias [E] (sigmoid only; empty = 0). forced [N·k] (model.forced_routing; empty: none):
// token n's k experts are forced[n·k .. n·k + k) instead of its top-k (slots still listed by expert index); the
// weights are still its scores of those experts (normalised as configured), so everything downstream, the losses and the backward,
// is unchanged.
Routing route(std::span<const float> logits, std::span<const float> bias, const RouterOptions& options,
              std::span<const std::int32_t> forced = {});

// Scratch of route_into and router_backward_into, kept by the caller from call to call (contents meaningless
// between calls), and the logits' gradient router_backward_into hands back.
struct RouterWorkspace {
  std::vector<double> key, dq, ds;    // [E] each
  std::vector<std::int32_t> order;    // [E]
  std::vector<std::int64_t> next;     // [E] the next routed row of each expert (group_rows)
  std::vector<float> dlogits;         // [N·E] router_backward_into's result
};

// route() into `out` (every field rewritten; its vectors' capacity kept), with `ws` as scratch.
void route_into(Routing& out, RouterWorkspace& ws, std::span<const float> logits, std::span<const float> bias,
                const RouterOptions& options, std::span<const std::int32_t> forced = {});

// Context parallelism: `counts` [E] and `tokens` are the micro-batch's whole sequences' (this rank's counts and
// tokens summed over its cp group). Makes them the aux loss's f_e and recomputes aux_loss (this rank's P_e with
// the whole f_e); router_backward then uses them.
void balance_over(Routing& routing, std::span<const std::int64_t> counts, std::int64_t tokens,
                  const RouterOptions& options);

// The gradient of the router logits [N·E]: from dweight [N·k] (the gradient of the routing weights, already
// scaled as the loss), plus loss_scale times the gradients of the aux and z losses. Rows whose token_mask entry
// is false are 0 (empty mask: every row).
std::vector<float> router_backward(const Routing& routing, std::span<const float> dweight, double loss_scale,
                                   const RouterOptions& options, const std::vector<bool>& token_mask = {});
// The same into ws.dlogits (returned; valid until ws is used again), ws.dq and ws.ds as scratch.
std::span<const float> router_backward_into(RouterWorkspace& ws, const Routing& routing, std::span<const float> dweight,
                                            double loss_scale, const RouterOptions& options,
                                            const std::vector<bool>& token_mask = {});

// max / mean of counts (1 = balanced; 0 when no token was routed).
double load_imbalance(std::span<const std::int64_t> counts);

}  // namespace cleave::layers

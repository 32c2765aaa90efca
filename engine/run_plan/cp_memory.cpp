// See cp_memory.hpp.
#include "engine/run_plan/cp_memory.hpp"

#include <algorithm>

#include "engine/run_plan/memory_plan.hpp"
#include "engine/run_plan/workspace_memory.hpp"
#include "partition/families/family.hpp"

namespace cleave::run_plan {

// Context-parallel attention (layers/attention_core.hpp) keeps, per attention block and sample, more than the
// one-rank core the cost model prices (whose figures the plan divides by cp), where the core's output is also
// the output projection's stashed input (one storage). Whole-sequence bytes of [T, D/tp], like the costs.
//  - ring (ring_attention.hpp): the stash holds chunk-major copies of q, k, v (in place of qkv: the same bytes)
//    and of the two chunks' outputs besides the assembled output: one [T, D/tp] more. Its backward holds dout's
//    chunk copies and the dq chunks until dqkv is assembled: two more. Under bf16 the same bytes in other shapes: dq
//    accumulates in f32 (two bf16 tensors' worth) and dout's chunks are widened into the workspace at once, their bf16
//    copies dropped (ring_attention.cpp; the widened copies are attention_transients'). Selective recomputation reruns the
//    forward ring inside the backward (q, k, v and the output chunks: four more, on top of the statistics the
//    cost model counts; at the core's level only the output chunks are left, add_cp_attention_state). dK and dV travel in communication buffers, the block partials in the workspace.
//  - all_to_all (ulysses.hpp): the stash holds the core's output in the heads layout besides the exchanged-back
//    output the projection keeps: one more, with or without selective recomputation. Its backward holds dout in
//    the heads layout and dqkv in both layouts: four more.
// With grouped-query attention (Llama, Hkv < H) k and v are [T, K/tp], K = Hkv·hd, so "q, k, v" above is
// [T, (D + 2K)/tp] and all_to_all's second dqkv likewise.
// Full recomputation rebuilds the larger stash inside the backward and holds it through all of it
// (add_cp_attention_state: every phase holds the rebuilt one [T, D/tp] more, the core's over the rebuilt stash).
//
// The backward's extras are alive only in one phase of the block's backward, so they add to the level the block
// holds then, not to its peak over all phases (the cost model's max of the mlp's and the attention's phases):
// they end with the core's backward call (ring_attention_backward's locals; ulysses' under llama, whose core
// returns before the projections' backward) or, gpt under all_to_all, with the qkv projection's backward run
// inside it (attention_core_backward's `then`). Before, added to the block's peak: at GPipe cp2 (gpt d32, F 4D,
// where the mlp's phase is the peak) ring 2 [T, D] and all_to_all 1 over the measured activation peak, and llama
// (whose cost model leaves out of the core's phase the dq, dk, dv it allocates first and the mlp's dm) 2 under
// with either exchange (ContextParallel.ActivationMemoryFollowsThePlan).
namespace {

// What a block holds above its start while its attention core's backward assembles dqkv (per sample, like the
// costs), for the families whose layers the level is read from; -1 for the others (their extras then add to the
// block's peak, as before). TransformerBlock::backward_input holds dy, the mlp's dm and dx1 ([T, D], shards under
// sequence parallelism, with the mlp's and the output projection's gathered dy [T, D]); the attention layer holds
// dout [T, D/tp] and dqkv [T, (D + 2K)/tp], and llama's (LlamaAttention::backward_input) its dq, dk, dv besides.
// Less what the block's backward freed of its forward stash before (BlockRules::cp_core_backward_released_bytes: moe's
// routing tables, count rows and f32 logits less the logits' gradient, in the walk's units).
std::int64_t core_backward_level(const partition::BlockSpec& block, int tp, int cp, bool sequence_parallel, bool bf16,
                                 std::int64_t tqkv) {
  const partition::BlockRules* rules = partition::family_block_rules(block.kind);
  if (rules == nullptr || rules->cp_core_backward_qkv_grads <= 0) return -1;
  const std::int64_t t = block.seq_len, d = block.in_features;
  const std::int64_t residual = sequence_parallel && tp > 1 ? (3 * (t / tp) * d + 2 * t * d) * 4 : 3 * t * d * 4;
  const std::int64_t released =
      rules->cp_core_backward_released_bytes ? rules->cp_core_backward_released_bytes(block, cp, bf16) : 0;
  return residual + t * d / tp * 4 + rules->cp_core_backward_qkv_grads * tqkv - released;
}

}  // namespace

void add_cp_attention_state(partition::BlockCost& cost, const partition::BlockSpec& block,
                            partition::Recompute recompute, int tp, int cp, bool ring, bool sequence_parallel,
                            const partition::BlockCost* bf16_cost) {
  if (block.n_heads <= 0) return;  // a block without attention (embedding, head, MLP and CNN layers)
  const bool bf16 = bf16_cost != nullptr;
  // The family's figures in the walk's units: under bf16 twice the bf16 cost's (its f32 and integer bytes whole),
  // which the caller reaches by adding 2 x bf16 - f32 to each field after this; the phases are compared in those
  // units, so that the f32 bytes of the phase that is not the peak (moe's logit gradients in the mixture's phase)
  // do not count in the core's (before, at cp2 bf16 top_k 1, where the core's phase is the peak: 256 B over).
  const std::int64_t walk_fixup = bf16 ? 2 * bf16_cost->backward_extra_bytes - cost.backward_extra_bytes : 0;
  const std::int64_t rebuilt = bf16 ? 2 * bf16_cost->recompute_transient_bytes : cost.recompute_transient_bytes;
  const std::int64_t kept = bf16 ? 2 * bf16_cost->activation_bytes : cost.activation_bytes;
  const std::int64_t td = block.seq_len * block.in_features / tp * 4;  // f32; bf16 halves all activations below
  const std::int64_t kv_heads = block.n_kv_heads > 0 ? block.n_kv_heads : block.n_heads;
  const std::int64_t tqkv = block.seq_len * (block.in_features + 2 * kv_heads * (block.in_features / block.n_heads)) /
                            tp * 4;  // packed q | k | v
  const bool stashed = ring ? recompute == partition::Recompute::kNone : recompute != partition::Recompute::kFull;
  if (stashed) cost.activation_bytes += td;
  std::int64_t extra = ring ? 2 * td : td + tqkv;
  if (ring && recompute == partition::Recompute::kSelective) extra += tqkv + td;
  if (recompute == partition::Recompute::kFull) extra += td;
  std::int64_t level = core_backward_level(block, tp, cp, sequence_parallel, bf16, tqkv);
  // Not read from the layers: the sum.
  if (level < 0) {
    cost.backward_extra_bytes += extra;
    return;
  }
  if (recompute == partition::Recompute::kSelective) level += rebuilt;  // the rebuilt lse
  // Full recomputation: the rerun rebuilds the stash (all of it but the kept input, which the block's start holds)
  // and the cp core's one [T, D/tp] more, both held through the whole backward: every phase of the block's (the
  // family's figure, which counts the rest of the rebuilt stash) holds that one more, and the core's level holds the
  // rebuilt stash besides the core's backward extras. Before, the extras were summed on top of the block's peak over
  // its phases: over by them less the rebuilt one where the mlp's phase is the peak (gpt at cp2 ring 2 [T, D],
  // all_to_all one; moe ring 2 [T, D], all_to_all [T, D] + [T, D + 2K]).
  if (recompute == partition::Recompute::kFull) {
    cost.backward_extra_bytes += td;
    extra -= td;
    level += rebuilt - kept + td;
  }
  // Selective ring: the rerun's q, k, v chunks are gone by the time dqkv is assembled (measured at cp2: one
  // [T, (D + 2K)/tp] over before, gpt 12,288 B, llama and moe 8,192 B); its output chunks remain.
  if (ring && recompute == partition::Recompute::kSelective) extra -= tqkv;
  // gpt under all_to_all: the extras are held through the qkv projection's backward too, whose partial dx [T, D]
  // comes on top of the core's level.
  const partition::BlockRules* rules = partition::family_block_rules(block.kind);
  const bool through_qkv = !ring && rules->cp_qkv_backward_inside_core;
  if (through_qkv) level += block.seq_len * block.in_features * 4;
  cost.backward_extra_bytes = std::max(cost.backward_extra_bytes + walk_fixup, level + extra) - walk_fixup;
}

void place_attention_scratch_at_core_level(BlockTransients& transients, const partition::BlockCost& cost,
                                           const partition::BlockSpec& block, int tp, bool sequence_parallel,
                                           bool bf16) {
  if (block.n_heads <= 0 || transients.backward.empty()) return;
  const std::int64_t kv_heads = block.n_kv_heads > 0 ? block.n_kv_heads : block.n_heads;
  const std::int64_t tqkv = block.seq_len * (block.in_features + 2 * kv_heads * (block.in_features / block.n_heads)) /
                            tp * 4;
  const std::int64_t level = core_backward_level(block, tp, 1, sequence_parallel, bf16, tqkv);
  if (level < 0) return;  // a family whose level is not read from its layers: the block's peak, as before
  const std::int64_t below = std::max<std::int64_t>(0, cost.backward_extra_bytes - level);
  for (TransientPhase& p : transients.backward) p.below = std::max(p.below, below);
}

void add_cp_whole_stash(partition::BlockCost& cost, const partition::BlockSpec& block, partition::Recompute recompute,
                        int cp, bool bf16) {
  const partition::BlockRules* rules = partition::family_block_rules(block.kind);
  if (cp <= 1 || rules == nullptr || rules->cp_whole_stash_bytes == nullptr) return;
  const std::int64_t units = rules->cp_whole_stash_bytes(block) * cp * (bf16 ? 2 : 1);
  (recompute == partition::Recompute::kFull ? cost.backward_extra_bytes : cost.activation_bytes) += units;
}

// Context parallelism's exchange buffers (MemoryCategory::kCommunication), per attention block and micro-batch of
// b samples: Tl = T / cp tokens, Q = D / tp query and K = Hkv·hd / tp key (and value) columns per token, s bytes an
// element (4; bf16 2). See memory_plan.hpp for the formula and ring_attention.cpp / ulysses.cpp for the buffers.
std::int64_t cp_exchange_bytes(const partition::BlockSpec& block, std::int64_t micro, int tp, int cp, bool ring,
                               std::int64_t dtype_bytes) {
  if (cp <= 1 || block.n_heads <= 0) return 0;  // no exchange, or a block without attention
  const std::int64_t kv_heads = block.n_kv_heads > 0 ? block.n_kv_heads : block.n_heads;
  const std::int64_t q_cols = block.in_features / tp;
  const std::int64_t kv_cols = kv_heads * (block.in_features / block.n_heads) / tp;
  const std::int64_t local_tokens = micro * (block.seq_len / cp);
  if (ring) {
    // One rank's K/V blocks (k and v, both chunks): U. Forward: the held block and the next in flight, 2U from
    // step 1 on. Backward: the travelling dK/dV and its rotation target (2G, G = U at 4 B an element: the gradient
    // sums in f32 in either precision) besides the K/V in flight: the next block (steps before the last) and the
    // held one (steps after the first): 2G + 2U at cp >= 3, 2G + U at cp 2 (fp32: 4U, 3U).
    const std::int64_t elements = local_tokens * 2 * kv_cols;
    return 2 * elements * 4 + std::min(cp - 1, 2) * elements * dtype_bytes;
  }
  // all_to_all: an exchange of a [b, Tl, W] tensor holds cp send blocks and cp - 1 receive blocks of W / cp
  // columns (the own block is not copied twice); the widest is q | k | v (forward) and dqkv (backward).
  return (2 * cp - 1) * local_tokens * ((q_cols + 2 * kv_cols) / cp) * dtype_bytes;
}

BlockTransients attention_transients(const partition::BlockSpec& block, std::int64_t micro, int tp, int cp, bool ring,
                                     bool bf16, int threads) {
  BlockTransients x;
  if (block.n_heads <= 0) return x;
  const std::int64_t s = bf16 ? 2 : 4;
  const std::int64_t kv_heads = block.n_kv_heads > 0 ? block.n_kv_heads : block.n_heads;
  const std::int64_t kv_cols = kv_heads * (block.in_features / block.n_heads) / tp;
  const std::int64_t dqkv = block.seq_len * (block.in_features / tp + 2 * kv_cols) * 4;  // walk units
  if (cp <= 1) {
    const std::int64_t scratch =
        cpu_attention_scratch_bytes(block, threads, bf16, attention_kernel_groups(block, micro, tp, 1));
    if (scratch > 0) x.forward.push_back({0, scratch}), x.backward.push_back({0, scratch});
    return x;
  }
  const std::int64_t exchange = cp_exchange_bytes(block, micro, tp, cp, ring, s);
  if (!ring) {
    x.forward.push_back({0, exchange});
    // The backward's buffers end when dqkv is exchanged back: at the core's level, under the block's backward peak
    // by what comes after them in the core's phase (gpt: the qkv projection's partial dx [T, D], run inside the
    // core, add_cp_attention_state's through_qkv; none for llama and moe, whose core returns first).
    const partition::BlockRules* rules = partition::family_block_rules(block.kind);
    const bool through_qkv = rules != nullptr && rules->cp_qkv_backward_inside_core;
    const std::int64_t after = through_qkv ? block.seq_len * block.in_features * 4 : 0;
    x.backward.push_back({after, exchange});
    const std::int64_t scratch =
        cpu_attention_scratch_bytes(block, threads, bf16, attention_kernel_groups(block, micro, tp, cp));
    if (scratch > 0) x.forward.push_back({0, scratch}), x.backward.push_back({dqkv + after, scratch});
    return x;
  }
  const std::int64_t unit = micro * (block.seq_len / cp) * 2 * kv_cols * s;  // U
  partition::BlockSpec chunk = block;
  chunk.seq_len = block.seq_len / (2 * cp);
  const std::int64_t scratch = cpu_attention_scratch_bytes(chunk, threads, false);  // the ring's kernel runs on f32
  const std::int64_t partials = threads > 0 ? micro * chunk.seq_len * (block.in_features / tp + block.n_heads / tp) * 4
                                            : 0;  // the partial output and log-sum-exp (counted with the CPU kernels)
  // bf16: the widened operands (workspace), and in the forward the f32 output accumulators (activations, [b, T / cp,
  // D / tp]: the stash counts the bf16 outputs they are rounded into at the end, while both are alive).
  const RingWidened widened = ring_widened_bytes(block, micro, tp, cp, bf16);
  const std::int64_t out32 = bf16 ? micro * (block.seq_len / cp) * (block.in_features / tp) * 4 : 0;
  x.forward.push_back({0, std::min(cp - 1, 2) * unit + scratch + partials + widened.forward + out32});
  const std::int64_t dkv = micro * (block.seq_len / cp) * 2 * kv_cols * 4;  // one f32 dK/dV set (G)
  x.backward.push_back({0, 2 * dkv});  // the f32 dK/dV and its target
  // A backward step's kernel scratch lives inside its block calls, the travelling dK/dV's rotation target (G) only
  // after them (ring_attention.cpp): never both. Before, the plan held the two at once, the kernel's scratch over
  // the measured total (ContextParallel.ActivationMemoryFollowsThePlan: bf16 cp2 gpt 3,136 B, llama 2,624 B; cp4
  // 1,056 B / 800 B, fp32 cp4 too; the whole residual apart from the activations' and the loss slots).
  x.backward.push_back({dqkv, widened.backward + std::max(exchange, exchange - dkv + scratch)});
  return x;
}

}  // namespace cleave::run_plan

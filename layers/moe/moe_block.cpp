// The moe block's parts for any tp size, wired by TransformerBlock (see moe_block.hpp).
#include "layers/moe/moe_block.hpp"

#include "layers/llama/llama_block.hpp"
#include "layers/llama/swiglu_mlp.hpp"
#include "layers/moe/moe_mlp.hpp"
#include "layers/moe/shared_expert_gate.hpp"

namespace cleave::layers {
std::unique_ptr<TransformerBlock> make_moe_block(const partition::BlockSpec& b, const partition::MoeConfig& config,
                                                 const ParamInit& init, int tp_size, int tp_rank, int ep_size,
                                                 int ep_rank) {
  CLEAVE_ASSERT(b.kind == partition::BlockKind::kMoeBlock, "make_moe_block: block '{}' is not a moe block", b.name);
  // llama's attention and norms (layers/llama/llama_block.hpp) around MoeMlp.
  return make_llama_shaped_block(b, init, tp_size, tp_rank, "expert ffn", [&]() -> LayerPtr {
    const std::int64_t d = b.in_features, f = b.d_ff;
    RouterOptions router;
    router.kind = config.router;
    router.experts = b.n_experts;
    router.top_k = b.top_k;
    router.normalize = config.normalize_top_k;
    router.aux_coef = config.aux_loss_coef;
    router.z_coef = config.z_loss_coef;
    router.bias_update_rate = router.kind == partition::RouterKind::kSigmoid ? config.bias_update_rate : 0.0;
    router.forced = partition::forced_routing(config.forced_routing, b.n_experts, b.top_k);
    const std::string m = b.name + ".moe";
    LayerPtr shared;
    if (b.n_shared_experts > 0) {
      shared = make_swiglu_mlp(m + ".shared", d, b.n_shared_experts * f, init, tp_size, tp_rank);
      if (b.shared_expert_gate) {
        shared = std::make_unique<SharedExpertGate>(m + ".shared_gate", d, std::move(shared), init);
      }
    }
    return std::make_unique<MoeMlp>(m, d, f, router, std::move(shared), init, tp_size, tp_rank, ep_size, ep_rank);
  });
}

}  // namespace cleave::layers

// The model-family table below the layers: one Family row per model.type and one BlockRules row per block
// kind a family owns. Generic code (config validation, the plan, tp rules, the cost model, the memory plan,
// the planner) asks this table instead of switching on ModelType or on a family's BlockKind.
//
// A family's home at this level is partition/families/<family>.{hpp,cpp} (its config struct, the checks of
// its keys, its block list) and, for a family with blocks of its own, <family>_block.cpp (their FLOPs,
// parameter, activation and weight-stash bytes, roofline work and tensor-parallel collectives). Its layer
// builder lives above the layers in layers/families/ (a table of its own at that level); its Hugging Face
// name map in engine/hf/hf_layout.cpp. Registration is explicit: family.cpp lists every row (no static
// self-registration, which linkers drop from static libraries).
//
// Invariants: family(t).type == t for every ModelType; family_block_rules(k), when not null, has kind == k;
// every function pointer documented as required is set. Rows are constant data: there is no mutable state.
//
// Adding a family: docs/architecture.md "Model families" (kinds.hpp, this header's FamilyConfigs, the
// family's files, one row in family.cpp, one in layers/families/table.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/dtype.hpp"
#include "engine/core/shape.hpp"
#include "partition/families/cnn.hpp"
#include "partition/families/gpt.hpp"
#include "partition/families/kinds.hpp"
#include "partition/families/llama.hpp"
#include "partition/families/mlp.hpp"
#include "partition/families/moe.hpp"

namespace cleave::partition {

struct BlockSpec;
struct ModelSpec;
struct BlockCost;
struct BlockWork;
struct TpBlockComm;
struct ParamTensor;
enum class Recompute;

// A slice of a logical (tp 1) parameter whose gradient is zero in exact arithmetic, whatever the data: only
// rounding noise reaches it, so a correct layout and one rank differ there by noise alone, which AdamW normalises
// into steps up to lr (`cleave verify` holds such slices to the update rule's bound, engine/train/verify_compare.hpp).
struct NullGradient {
  std::string param;       // the parameter's name, as the layers and the checkpoints spell it
  std::int64_t begin = 0;  // elements [begin, end) of the flat logical tensor
  std::int64_t end = 0;
  std::string reason;      // why the gradient vanishes, for the report
};

// Every family's config struct; only the one model.type names is read, written and built. ModelSpec and
// config::ModelConfig both hold one (a family adds its struct here).
struct FamilyConfigs {
  GptConfig gpt;      // d_ff resolved (4 * d_model) by the config reader and the spec
  MlpConfig mlp;
  CnnConfig cnn;
  LlamaConfig llama;  // n_kv_heads and ffn_hidden_size resolved (llama_defaults) by the config reader and the spec
  MoeConfig moe;      // as llama's (moe_defaults)
};

// The sizes the language-model families share (llama: d_ff is ffn_hidden_size).
struct TokenSizes {
  std::int64_t vocab_size, d_model, n_layers, n_heads, seq_len, d_ff;
  bool tie_embeddings;
};

struct Family {
  ModelType type{};
  std::string_view name;  // model.type
  // Token sequences in, next-token loss out: token data, generation, tok/s figures, GPT-2 style init scale,
  // activation recomputation. Requires token_sizes.
  bool language_model = false;
  // Required: the family's block list, after its own config checks (ConfigKeyError naming model.<key>).
  ModelSpec (*make_spec)(const FamilyConfigs& configs) = nullptr;
  // The defaults that depend on other keys, filled in where a key was absent (gpt: d_ff = 4 * d_model; llama:
  // llama_defaults). The config reader applies it after reading and the writer writes the result, so
  // config.json holds resolved values. Null: nothing to resolve.
  void (*resolve)(FamilyConfigs& configs) = nullptr;
  // Language models: the shared sizes, from the (resolved) config.
  TokenSizes (*token_sizes)(const FamilyConfigs& configs) = nullptr;
  // Tensor parallelism: throws ConfigKeyError unless tp (> 1) splits every block of the family; null: the
  // family cannot be split (tp > 1 is refused naming the families that can).
  void (*check_tensor_parallel)(const FamilyConfigs& configs, int tp) = nullptr;
  // The tp sizes the config admits (the planner's candidates); required with check_tensor_parallel.
  std::vector<std::int64_t> (*tp_sizes)(const FamilyConfigs& configs) = nullptr;
  // parallel.sequence_parallel: the residual stream can be split along the sequence (needs tp support and
  // token_sizes; seq_len must divide by tp).
  bool sequence_parallel = false;
  // Classifiers (mlp, cnn): the per-sample input shape and the number of classes, for synthetic and digits data.
  struct ClassifierSizes {
    Shape sample;
    std::int64_t classes = 0;
  };
  ClassifierSizes (*classifier)(const FamilyConfigs& configs) = nullptr;
  // data.type "digits" (8×8 grey images): throws ConfigKeyError naming the model key unless the input fits one
  // image ([64] flat or [1, 8, 8]); null: the family cannot read digits.
  void (*check_digits_input)(const FamilyConfigs& configs) = nullptr;
  // Checks that need the data-parallel layout, known once the world is split (the config's resolve): throws
  // ConfigKeyError naming the model key when the family cannot train at `zero_stage` over dp × cp ranks (moe: the
  // sigmoid router's bias update needs the bias whole). Null: every ZeRO stage and dp × cp.
  void (*check_data_parallel)(const FamilyConfigs& configs, int zero_stage, std::int64_t dp, std::int64_t cp) = nullptr;
  // Required, for messages about the block count (more pipeline stages than blocks; blocks_per_stage's sum): what
  // the blocks are, as a clause ("its embedding, the model.n_layers transformer blocks, final norm, head and loss"),
  // and the key that makes the model deeper, with the blocks each entry adds where not one ("model.hidden, 2 blocks
  // per entry").
  std::string_view blocks_are;
  std::string_view deeper_by;
};

// The row of `type`; asserts that the table has it.
const Family& family(ModelType type);
// Every row, in ModelType order.
std::span<const Family> families();
// "gpt or llama" (quoted: "\"gpt\" or \"llama\""): the names of the rows for which `has` holds, for messages.
std::string family_names(bool (*has)(const Family&), std::string_view conjunction = "or", bool quoted = false);

// gpt and llama: token sequences in, next-token loss out.
inline bool is_language_model(ModelType type) { return family(type).language_model; }

// What generic code needs of a block kind a family owns (its repeated layer). Every pointer is required.
struct BlockRules {
  BlockKind kind{};
  // Activation recomputation (train.recompute) applies to it; under tensor parallelism it exchanges the
  // residual stream twice per pass (attention and MLP: the planner's estimate); `cleave profile` and the
  // planner time it to calibrate a hardware profile.
  bool repeated_layer = false;
  // Under sequence parallelism its input and output are [T / tp, D] sequence shards.
  bool sequence_sharded = false;
  // RMSNorms on its residual stream (llama, moe: 2; gpt's are LayerNorms: 0); `simulate --norm torch_unfused`
  // prices each as PyTorch's eager ops (block_work.hpp, run_kernels_work).
  int rms_norms = 0;
  // Its forward's GEMMs are dense projections in launch order, with no expert routing (gpt, llama): torchtitan's
  // per-op selective policy (`simulate --selective-recompute torchtitan_op`, block_work.hpp) applies to it.
  bool dense_projections = false;
  // cost_model.hpp's block_cost for this kind (every field, one tp rank's bytes).
  BlockCost (*cost)(const BlockSpec& block, DType dtype, Recompute recompute, int tp, bool sequence_parallel) = nullptr;
  // block_work.hpp's block_work for this kind.
  BlockWork (*work)(const BlockSpec& block, DType dtype, Recompute recompute, int tp, std::int64_t micro_batch,
                    bool sequence_parallel) = nullptr;
  // cost_model.hpp's tp_block_comm for this kind (tp > 1).
  TpBlockComm (*tp_comm)(const BlockSpec& block, DType dtype, int tp, bool sequence_parallel,
                         Recompute recompute) = nullptr;
  // measured_costs.hpp's block_shape_key: the kind's name and every size its timing depends on.
  std::string (*shape_key)(const BlockSpec& block) = nullptr;
  // param_tensors.hpp's block_param_tensors for this kind: one tp rank's parameter tensors, in its layer's order.
  std::vector<ParamTensor> (*param_tensors)(const BlockSpec& block, int tp) = nullptr;
  // Context parallelism (cp > 1): the bytes per sample the block keeps from its forward to the end of its
  // backward_input that every cp rank holds whole (not a T / cp share, so the memory plan does not divide them by
  // cp): moe's cp-summed expert counts (layers/moe/balance_exchange.hpp). Null: none.
  std::int64_t (*cp_whole_stash_bytes)(const BlockSpec& block) = nullptr;
  // Context parallelism's memory plan (engine/run_plan/cp_memory.cpp): how many [T, (D + 2K) / tp] gradient
  // tensors its attention layer holds while the core's backward assembles dqkv (gpt: dqkv; llama and moe, whose
  // LlamaAttention::backward_input allocates dq, dk, dv first: 2); 0 = not read from the layers (the cp extras
  // then add to the block's peak).
  int cp_core_backward_qkv_grads = 0;
  // Under all_to_all its attention core runs the qkv projection's backward inside it (gpt's
  // attention_core_backward `then`), so the exchange's extras are held through that backward too.
  bool cp_qkv_backward_inside_core = false;
  // Context parallelism's memory plan: the bytes per sample, at cp ranks, by which the block's backward lowers its
  // forward stash for good before the attention core's backward, so that the core's level (cp_core_backward_qkv_grads)
  // is that much under the block's start: moe's routing tables, count exchange rows and f32 logits, which
  // MoeMlp::backward_input drops, less the logits' gradient it keeps in their place. In the memory plan's units
  // (f32 bytes per element; `bf16`: the f32 and integer tensors counted twice, whole once the walk halves). Null: none.
  std::int64_t (*cp_core_backward_released_bytes)(const BlockSpec& block, int cp, bool bf16) = nullptr;
  // The block's parameter slices whose gradient vanishes in exact arithmetic (NullGradient above): gpt's attention
  // key bias. Null: none.
  std::vector<NullGradient> (*null_gradients)(const BlockSpec& block) = nullptr;
};

// Every NullGradient of the spec's family-owned blocks (BlockRules::null_gradients), in block order.
std::vector<NullGradient> null_gradients(const ModelSpec& spec);

// The rules of a family-owned block kind; null for the common kinds (embedding, norms, head, loss, linear,
// activations, conv, pool, flatten), which cost_model.cpp, block_work.cpp and tp_rules.cpp handle themselves.
const BlockRules* family_block_rules(BlockKind kind);
// The family's repeated layer (BlockRules::repeated_layer).
inline bool is_repeated_layer(BlockKind kind) {
  const BlockRules* rules = family_block_rules(kind);
  return rules != nullptr && rules->repeated_layer;
}

}  // namespace cleave::partition

// One field table per config section: each key with its member, its kind and range, and a one-line
// meaning. config.cpp reads a section by looping over its table, write.cpp writes it by the same table (so the
// key order of config.json is the table's order), and the docs test checks each key has a row in
// docs/config.md. Invariant: a table lists its section's keys in the documented order, each exactly once.
// The model section has one table per model type (only the configured type's is read and written); batch's
// keys are optional (any two imply the third): unset ones are neither read nor written.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "engine/config/config.hpp"

namespace cleave::config {

using partition::CnnConfig;
using partition::GptConfig;
using partition::LlamaConfig;
using partition::MlpConfig;
using partition::MoeConfig;

// How a key is read (the matching config.cpp Reader method) and what its JSON value is.
enum class FieldKind {
  kInteger,      // integer in [min_int, max_int] (an optional member: absent when the key is)
  kUnsigned,     // integer ≥ 0 up to 2^64 - 1
  kNumber,       // number in [min, max], either end open
  kBoolean,
  kString,
  kChoice,       // an enum's name (enums.hpp)
  kBytes,        // bytes: an integer ≥ 0 or a string like "512MiB"
  kIntegerList,  // array of integers, each in [min_int, max_int]
  kNumberPair,   // array of 2 numbers, each in [min, max)
  kStringList,   // array of strings
  kNumberList,   // array of numbers, each in [min, max]
};

// The member a key reads into and writes from; the alternative picks the C++ type.
template <typename Section>
using FieldMember =
    std::variant<int Section::*, std::int64_t Section::*, std::optional<std::int64_t> Section::*, std::uint64_t Section::*, double Section::*,
                 bool Section::*, std::string Section::*, std::vector<std::int64_t> Section::*,
                 std::vector<std::string> Section::*, std::vector<double> Section::*,
                 std::array<double, 2> Section::*, PartitionMethod Section::*, GradReduceDtype Section::*, ZeroReduce Section::*, ContextParallelComm Section::*,
                 AutoScheduleObjectiveChoice Section::*,
                 CommBackend Section::*, P2PProgress Section::*, OptimizerType Section::*,
                 LrScheduleType Section::*, Recompute Section::*, DataType Section::*,
                 TokenFileFormat Section::*, DeviceType Section::*, Precision Section::*, Activation Section::*,
                 CpuBlas Section::*, RouterKind Section::*>;

template <typename Section>
struct Field {
  std::string_view key;
  FieldMember<Section> member;
  FieldKind kind;
  std::string_view meaning;
  std::int64_t min_int = 0;  // kInteger, kIntegerList
  std::int64_t max_int = std::numeric_limits<std::int64_t>::max();
  double min = 0.0;  // kNumber, kNumberPair
  double max = std::numeric_limits<double>::infinity();
  bool min_open = false;
  bool max_open = false;
};

// Whether a field's kind is one its member's C++ type can hold (checked at compile time for every table below).
template <typename Section>
constexpr bool kind_fits(const Field<Section>& field) {
  return std::visit(
      [&](auto member) {
        using T = std::remove_cvref_t<decltype(std::declval<Section&>().*member)>;
        switch (field.kind) {
          case FieldKind::kInteger:
            return std::is_same_v<T, int> || std::is_same_v<T, std::int64_t> ||
                   std::is_same_v<T, std::optional<std::int64_t>>;
          case FieldKind::kUnsigned: return std::is_same_v<T, std::uint64_t>;
          case FieldKind::kNumber: return std::is_same_v<T, double>;
          case FieldKind::kBoolean: return std::is_same_v<T, bool>;
          case FieldKind::kString: return std::is_same_v<T, std::string>;
          case FieldKind::kChoice: return std::is_enum_v<T>;
          case FieldKind::kBytes: return std::is_same_v<T, std::int64_t>;
          case FieldKind::kIntegerList: return std::is_same_v<T, std::vector<std::int64_t>>;
          case FieldKind::kNumberPair: return std::is_same_v<T, std::array<double, 2>>;
          case FieldKind::kStringList: return std::is_same_v<T, std::vector<std::string>>;
          case FieldKind::kNumberList: return std::is_same_v<T, std::vector<double>>;
        }
        return false;
      },
      field.member);
}

template <typename Section, std::size_t N>
constexpr bool kinds_fit(const std::array<Field<Section>, N>& fields) {
  for (const Field<Section>& field : fields) {
    if (!kind_fits(field) || field.meaning.empty()) return false;
  }
  return true;
}

// Upper limits of sizes and counts (see config.cpp's comment on why these values).
constexpr std::int64_t kMaxBatch = std::int64_t{1} << 24;  // micro-batch, accumulation steps
constexpr std::int64_t kMaxGlobalBatch = std::int64_t{1} << 40;
constexpr std::int64_t kMaxFeatures = std::int64_t{1} << 24;  // vocab, d_model, d_ff, seq_len, hidden, classes
constexpr std::int64_t kMaxCount = std::int64_t{1} << 16;  // layers, heads, channels, kernel, pool, image side
constexpr int kMaxParallel = 1 << 16;                        // tp, pp, dp, virtual stages
constexpr double kInf = std::numeric_limits<double>::infinity();

// parallel.*: the keys before the partition subsection, then the ones after it (kParallelPartitionAt).
inline constexpr std::array<Field<ParallelConfig>, 20> kParallelFields = {{
    {"tensor_model_parallel_size", &ParallelConfig::tensor_model_parallel_size, FieldKind::kInteger,
     "tensor-parallel width (ranks sharing each layer)", 1, kMaxParallel},
    {"pipeline_model_parallel_size", &ParallelConfig::pipeline_model_parallel_size, FieldKind::kInteger,
     "pipeline stages (ranks along the layer stack)", 1, kMaxParallel},
    {"data_parallel_size", &ParallelConfig::data_parallel_size, FieldKind::kInteger,
     "data-parallel replicas; -1 = world size / (tp × pp)", -1, kMaxParallel},
    {"virtual_pipeline_stages", &ParallelConfig::virtual_pipeline_stages, FieldKind::kInteger,
     "model chunks per pipeline rank (interleaved schedules)", 1, kMaxParallel},
    {"schedule", &ParallelConfig::schedule, FieldKind::kString, "pipeline schedule name or schedule file path"},
    {"auto_schedule_memory_limit", &ParallelConfig::auto_schedule_memory_limit, FieldKind::kInteger,
     "schedule auto: live micro-batch stashes per pp rank; 0 = pp", 0, std::numeric_limits<int>::max()},
    {"auto_schedule_profile", &ParallelConfig::auto_schedule_profile, FieldKind::kString,
     "schedule auto: a `cleave profile` output to build from"},
    {"auto_schedule_weight_stash_fraction", &ParallelConfig::auto_schedule_weight_stash_fraction, FieldKind::kNumber,
     "schedule auto: what a stash weighs between its I and W (M_W / M_B); 1 = whole", 0, 0, 0.0, 1.0,
     /*min_open=*/true},
    {"auto_schedule_objective", &ParallelConfig::auto_schedule_objective, FieldKind::kChoice,
     "schedule auto: what the search minimises first: makespan or span"},
    {"dp_bucket_mb", &ParallelConfig::dp_bucket_mb, FieldKind::kNumber, "gradient all-reduce bucket size in MB", 0,
     0, 0.0, kInf, /*min_open=*/true},
    {"grad_reduce_dtype", &ParallelConfig::grad_reduce_dtype, FieldKind::kChoice,
     "dtype data-parallel gradient buckets travel in"},
    {"comm_backend", &ParallelConfig::comm_backend, FieldKind::kChoice, "communicator carrying tensors"},
    {"p2p_progress", &ParallelConfig::p2p_progress, FieldKind::kChoice, "background progress of MPI transfers"},
    {"sequence_parallel", &ParallelConfig::sequence_parallel, FieldKind::kBoolean,
     "split tp-replicated regions along the sequence (needs tp > 1)"},
    {"context_parallel_size", &ParallelConfig::context_parallel_size, FieldKind::kInteger,
     "context-parallel width (ranks sharing each sequence)", 1, kMaxParallel},
    {"context_parallel_comm", &ParallelConfig::context_parallel_comm, FieldKind::kChoice,
     "how context-parallel ranks exchange keys and values: ring or all_to_all"},
    {"expert_model_parallel_size", &ParallelConfig::expert_model_parallel_size, FieldKind::kInteger,
     "expert-parallel width (ranks splitting each MoE block's experts, taken from dp × cp)", 1, kMaxParallel},
    {"moe_a2a_overlap", &ParallelConfig::moe_a2a_overlap, FieldKind::kBoolean,
     "dualpipev with ep > 1: run each F&B pair interleaved, hiding one's all-to-all behind the other's compute"},
    {"ep_stash_imbalance", &ParallelConfig::ep_stash_imbalance, FieldKind::kNumber,
     "ep memory plan: a rank's routed rows over blocks stashed, over the mean; 0 = the dropless bound", 0, 0, 0.0,
     kInf},
    {"ep_peak_imbalance", &ParallelConfig::ep_peak_imbalance, FieldKind::kNumber,
     "ep memory plan: the busiest block's busiest rank's routed rows over the mean; 0 = the dropless bound", 0, 0,
     0.0, kInf},
}};
constexpr std::size_t kParallelPartitionAt = 9;  // parallel.partition sits before kParallelFields[9]

inline constexpr std::array<Field<PartitionConfig>, 2> kPartitionFields = {{
    {"method", &PartitionConfig::method, FieldKind::kChoice, "how blocks are split into pipeline stages"},
    {"blocks_per_stage", &PartitionConfig::blocks_per_stage, FieldKind::kIntegerList,
     "method manual: blocks per stage, pp × virtual stages entries", 1, kMaxCount + 3},
}};

inline constexpr std::array<Field<OptimizerConfig>, 13> kOptimizerFields = {{
    {"type", &OptimizerConfig::type, FieldKind::kChoice, "optimizer: adamw or sgd"},
    {"lr", &OptimizerConfig::lr, FieldKind::kNumber, "peak learning rate"},
    {"weight_decay", &OptimizerConfig::weight_decay, FieldKind::kNumber, "decoupled (adamw) or L2 (sgd) decay"},
    {"betas", &OptimizerConfig::betas, FieldKind::kNumberPair, "adamw moment decay rates", 0, 0, 0.0, 1.0},
    {"eps", &OptimizerConfig::eps, FieldKind::kNumber, "adamw denominator epsilon", 0, 0, 0.0, kInf,
     /*min_open=*/true},
    {"momentum", &OptimizerConfig::momentum, FieldKind::kNumber, "sgd momentum", 0, 0, 0.0, 1.0, false,
     /*max_open=*/true},
    {"nesterov", &OptimizerConfig::nesterov, FieldKind::kBoolean, "sgd Nesterov momentum"},
    {"grad_clip", &OptimizerConfig::grad_clip, FieldKind::kNumber, "max global gradient norm; 0 = off"},
    {"warmup_steps", &OptimizerConfig::warmup_steps, FieldKind::kInteger, "linear warm-up steps from 0 to lr"},
    {"schedule", &OptimizerConfig::schedule, FieldKind::kChoice, "learning-rate decay after warm-up"},
    {"min_lr", &OptimizerConfig::min_lr, FieldKind::kNumber, "learning rate at the end of the decay"},
    {"zero_stage", &OptimizerConfig::zero_stage, FieldKind::kInteger, "ZeRO stage: 1 shards optimizer state, 2 also gradients, 3 also parameters",
     0, std::numeric_limits<int>::max()},
    {"zero_reduce", &OptimizerConfig::zero_reduce, FieldKind::kChoice,
     "ZeRO-2/3: reduce-scatter gradients per micro-batch (peak 1/dp) or once per step"},
}};

inline constexpr std::array<Field<TrainConfig>, 12> kTrainFields = {{
    {"steps", &TrainConfig::steps, FieldKind::kInteger, "optimizer steps to train", 1},
    {"seed", &TrainConfig::seed, FieldKind::kUnsigned, "random seed of weights and data"},
    {"log_interval", &TrainConfig::log_interval, FieldKind::kInteger, "log every N steps", 1},
    {"deterministic", &TrainConfig::deterministic, FieldKind::kBoolean, "bit-identical runs and dp layouts"},
    {"out_dir", &TrainConfig::out_dir, FieldKind::kString, "run directory for logs, metrics and reports"},
    {"comm_timeout_s", &TrainConfig::comm_timeout_s, FieldKind::kNumber, "watchdog seconds per communication",
     0, 0, 0.0, kInf, /*min_open=*/true},
    {"trace", &TrainConfig::trace, FieldKind::kBoolean, "write per-rank trace.json timelines"},
    {"eval_interval", &TrainConfig::eval_interval, FieldKind::kInteger, "evaluate every N steps; 0 = at the end"},
    {"eval_batches", &TrainConfig::eval_batches, FieldKind::kInteger, "global batches per evaluation; 0 = none"},
    {"recompute", &TrainConfig::recompute, FieldKind::kChoice, "activation recomputation of gpt blocks"},
    {"report", &TrainConfig::report, FieldKind::kBoolean, "write report.html at the end"},
    {"skip_nonfinite_steps", &TrainConfig::skip_nonfinite_steps, FieldKind::kInteger,
     "non-finite steps in a row skipped before the run stops"},
}};

inline constexpr std::array<Field<CheckpointConfig>, 5> kCheckpointFields = {{
    {"dir", &CheckpointConfig::dir, FieldKind::kString, "checkpoint directory; \"\" = out_dir/checkpoints"},
    {"interval", &CheckpointConfig::interval, FieldKind::kInteger, "save every N steps; 0 = final only"},
    {"keep_last", &CheckpointConfig::keep_last, FieldKind::kInteger, "complete checkpoints kept; 0 = all"},
    {"save_final", &CheckpointConfig::save_final, FieldKind::kBoolean, "a checkpoint after the last step"},
    {"background", &CheckpointConfig::background, FieldKind::kBoolean, "write checkpoint files on a thread"},
}};

// data.val_fraction and data.path have digits defaults applied after the loop (config.cpp read_data).
inline constexpr std::array<Field<DataConfig>, 7> kDataFields = {{
    {"type", &DataConfig::type, FieldKind::kChoice, "data source"},
    {"path", &DataConfig::path, FieldKind::kString, "training data file"},
    {"paths", &DataConfig::paths, FieldKind::kStringList, "token shards or globs, one source each"},
    {"weights", &DataConfig::weights, FieldKind::kNumberList, "sampling weight of each entry of paths", 0, 0, 0.0},
    {"val_path", &DataConfig::val_path, FieldKind::kString, "evaluation data file"},
    {"val_fraction", &DataConfig::val_fraction, FieldKind::kNumber, "held-out tail of the file for evaluation", 0,
     0, 0.0, 1.0, false, /*max_open=*/true},
    {"format", &DataConfig::format, FieldKind::kChoice, "token file format (tokens only)"},
}};

inline constexpr std::array<Field<DeviceConfig>, 4> kDeviceFields = {{
    {"type", &DeviceConfig::type, FieldKind::kChoice, "device kind: cpu or cuda"},
    {"memory_limit", &DeviceConfig::memory_limit, FieldKind::kBytes, "allocator cap per rank; 0 = none"},
    {"precision", &DeviceConfig::precision, FieldKind::kChoice, "compute precision"},
    {"blas", &DeviceConfig::blas, FieldKind::kChoice, "GEMM library of the cpu backend"},
}};

// model.*: one table per model type; only the configured type's keys are read and written (config.cpp
// read_model also names another type's key as such). gpt's d_ff, when absent, is 4 x d_model (after the loop).
inline constexpr std::array<Field<GptConfig>, 7> kGptFields = {{
    {"vocab_size", &GptConfig::vocab_size, FieldKind::kInteger, "vocabulary size (token ids 0..V-1)", 1, kMaxFeatures},
    {"d_model", &GptConfig::d_model, FieldKind::kInteger, "hidden width", 1, kMaxFeatures},
    {"n_layers", &GptConfig::n_layers, FieldKind::kInteger, "transformer blocks", 1, kMaxCount},
    {"n_heads", &GptConfig::n_heads, FieldKind::kInteger, "attention heads", 1, kMaxCount},
    {"seq_len", &GptConfig::seq_len, FieldKind::kInteger, "tokens per sample", 1, kMaxFeatures},
    {"d_ff", &GptConfig::d_ff, FieldKind::kInteger, "MLP width; absent = 4 x d_model", 1, kMaxFeatures},
    {"tie_embeddings", &GptConfig::tie_embeddings, FieldKind::kBoolean, "the LM head shares the embedding table"},
}};

// Absent n_kv_heads and ffn_hidden_size resolve on reading (n_heads; Llama's width rule) and are written resolved.
inline constexpr std::array<Field<LlamaConfig>, 15> kLlamaFields = {{
    {"vocab_size", &LlamaConfig::vocab_size, FieldKind::kInteger, "vocabulary size (token ids 0..V-1)", 1, kMaxFeatures},
    {"d_model", &LlamaConfig::d_model, FieldKind::kInteger, "hidden width", 1, kMaxFeatures},
    {"n_layers", &LlamaConfig::n_layers, FieldKind::kInteger, "llama blocks", 1, kMaxCount},
    {"n_heads", &LlamaConfig::n_heads, FieldKind::kInteger, "query heads", 1, kMaxCount},
    {"n_kv_heads", &LlamaConfig::n_kv_heads, FieldKind::kInteger, "key/value heads (grouped-query); absent = n_heads",
     1, kMaxCount},
    {"seq_len", &LlamaConfig::seq_len, FieldKind::kInteger, "tokens per sample", 1, kMaxFeatures},
    {"ffn_hidden_size", &LlamaConfig::ffn_hidden_size, FieldKind::kInteger,
     "SwiGLU width; absent = 8/3 x d_model rounded up to a multiple of 64", 1, kMaxFeatures},
    {"rope_theta", &LlamaConfig::rope_theta, FieldKind::kNumber, "rotary embedding base", 0, 0, 0.0, kInf,
     /*min_open=*/true},
    {"norm_eps", &LlamaConfig::norm_eps, FieldKind::kNumber, "RMSNorm epsilon", 0, 0, 0.0, kInf, /*min_open=*/true},
    {"tie_embeddings", &LlamaConfig::tie_embeddings, FieldKind::kBoolean, "the LM head shares the embedding table"},
    {"max_seq_len", &LlamaConfig::max_seq_len, FieldKind::kInteger,
     "the longest sequence the model serves (HF max_position_embeddings); absent = seq_len; seq_len <= it", 1,
     kMaxFeatures},
    {"sliding_window", &LlamaConfig::sliding_window, FieldKind::kInteger,
     "each query attends to the last N keys, itself included (Mistral); 0 = all earlier keys", 0, kMaxFeatures},
    {"sliding_window_from_layer", &LlamaConfig::sliding_window_from_layer, FieldKind::kInteger,
     "the window applies to blocks from this one on (Qwen2's max_window_layers); 0 = every block", 0, kMaxCount},
    {"qkv_bias", &LlamaConfig::qkv_bias, FieldKind::kBoolean, "q, k and v projections carry biases (Qwen2)"},
    {"qk_norm", &LlamaConfig::qk_norm, FieldKind::kBoolean,
     "RMSNorm over each head of q and k before the rotary embedding (Qwen3)"},
}};

// model.type "moe": llama's keys (ffn_hidden_size is each expert's width), then the mixture's (moe.hpp).
inline constexpr std::array<Field<MoeConfig>, 23> kMoeFields = {{
    {"vocab_size", &MoeConfig::vocab_size, FieldKind::kInteger, "vocabulary size (token ids 0..V-1)", 1, kMaxFeatures},
    {"d_model", &MoeConfig::d_model, FieldKind::kInteger, "hidden width", 1, kMaxFeatures},
    {"n_layers", &MoeConfig::n_layers, FieldKind::kInteger, "moe blocks", 1, kMaxCount},
    {"n_heads", &MoeConfig::n_heads, FieldKind::kInteger, "query heads", 1, kMaxCount},
    {"n_kv_heads", &MoeConfig::n_kv_heads, FieldKind::kInteger, "key/value heads (grouped-query); absent = n_heads",
     1, kMaxCount},
    {"seq_len", &MoeConfig::seq_len, FieldKind::kInteger, "tokens per sample", 1, kMaxFeatures},
    {"ffn_hidden_size", &MoeConfig::ffn_hidden_size, FieldKind::kInteger,
     "each expert's SwiGLU width; absent = 8/3 x d_model rounded up to a multiple of 64", 1, kMaxFeatures},
    {"rope_theta", &MoeConfig::rope_theta, FieldKind::kNumber, "rotary embedding base", 0, 0, 0.0, kInf,
     /*min_open=*/true},
    {"norm_eps", &MoeConfig::norm_eps, FieldKind::kNumber, "RMSNorm epsilon", 0, 0, 0.0, kInf, /*min_open=*/true},
    {"tie_embeddings", &MoeConfig::tie_embeddings, FieldKind::kBoolean, "the LM head shares the embedding table"},
    {"max_seq_len", &MoeConfig::max_seq_len, FieldKind::kInteger,
     "the longest sequence the model serves (HF max_position_embeddings); absent = seq_len; seq_len <= it", 1,
     kMaxFeatures},
    {"qkv_bias", &MoeConfig::qkv_bias, FieldKind::kBoolean, "q, k and v projections carry biases (Qwen2-MoE)"},
    {"qk_norm", &MoeConfig::qk_norm, FieldKind::kBoolean,
     "RMSNorm over each head of q and k before the rotary embedding (Qwen3-MoE)"},
    {"n_experts", &MoeConfig::n_experts, FieldKind::kInteger, "routed experts per block", 1, kMaxCount},
    {"top_k", &MoeConfig::top_k, FieldKind::kInteger, "experts each token is routed to (<= n_experts)", 1, kMaxCount},
    {"n_shared_experts", &MoeConfig::n_shared_experts, FieldKind::kInteger,
     "experts every token runs through, unweighted (Qwen2-MoE, DeepSeek)", 0, kMaxCount},
    {"shared_expert_gate", &MoeConfig::shared_expert_gate, FieldKind::kBoolean,
     "the shared experts' output scaled per token by sigmoid(x · w), w [1, d_model] (Qwen2-MoE)"},
    {"router", &MoeConfig::router, FieldKind::kChoice, "router kind: softmax (top-k) or sigmoid (with balancing bias)"},
    {"normalize_top_k", &MoeConfig::normalize_top_k, FieldKind::kBoolean,
     "divide each token's k routing weights by their sum"},
    {"aux_loss_coef", &MoeConfig::aux_loss_coef, FieldKind::kNumber, "load-balancing loss coefficient (0: off)", 0, 0,
     0.0, kInf},
    {"z_loss_coef", &MoeConfig::z_loss_coef, FieldKind::kNumber, "router z-loss coefficient (0: off)", 0, 0, 0.0, kInf},
    {"bias_update_rate", &MoeConfig::bias_update_rate, FieldKind::kNumber,
     "sigmoid router: the selection bias's step per optimizer step", 0, 0, 0.0, kInf},
    {"forced_routing", &MoeConfig::forced_routing, FieldKind::kString,
     "test/benchmark only: a named routing workload replacing the router's choice (\"\": off)"},
}};

inline constexpr std::array<Field<MlpConfig>, 4> kMlpFields = {{
    {"in_features", &MlpConfig::in_features, FieldKind::kInteger, "input features per sample", 1, kMaxFeatures},
    {"hidden", &MlpConfig::hidden, FieldKind::kIntegerList, "hidden layer widths", 1, kMaxFeatures},
    {"num_classes", &MlpConfig::num_classes, FieldKind::kInteger, "output classes", 2, kMaxFeatures},
    {"activation", &MlpConfig::activation, FieldKind::kChoice, "activation between layers"},
}};

inline constexpr std::array<Field<CnnConfig>, 7> kCnnFields = {{
    {"in_channels", &CnnConfig::in_channels, FieldKind::kInteger, "input image channels", 1, kMaxCount},
    {"height", &CnnConfig::height, FieldKind::kInteger, "input image height", 1, kMaxCount},
    {"width", &CnnConfig::width, FieldKind::kInteger, "input image width", 1, kMaxCount},
    {"channels", &CnnConfig::channels, FieldKind::kIntegerList, "output channels of each conv layer", 1, kMaxCount},
    {"kernel", &CnnConfig::kernel, FieldKind::kInteger, "conv kernel size (stride 1, same padding)", 1, kMaxCount},
    {"pool", &CnnConfig::pool, FieldKind::kInteger, "max-pool window and stride", 1, kMaxCount},
    {"num_classes", &CnnConfig::num_classes, FieldKind::kInteger, "output classes", 2, kMaxFeatures},
}};

// The model section's table of families: each family's field table and the FamilyConfigs member it reads
// into. read_model, write_model, the foreign-key messages and ModelConfig's operator== loop over it; it is
// the only place the config layer names a family (a family adds its Field table above and one row here).
template <typename Config>
struct ModelFields {
  ModelType type;
  Config partition::FamilyConfigs::*config;
  std::span<const Field<Config>> fields;
};
inline constexpr auto kModelFields =
    std::make_tuple(ModelFields<GptConfig>{ModelType::kGpt, &partition::FamilyConfigs::gpt, kGptFields},
                    ModelFields<MlpConfig>{ModelType::kMlp, &partition::FamilyConfigs::mlp, kMlpFields},
                    ModelFields<CnnConfig>{ModelType::kCnn, &partition::FamilyConfigs::cnn, kCnnFields},
                    ModelFields<LlamaConfig>{ModelType::kLlama, &partition::FamilyConfigs::llama, kLlamaFields},
                    ModelFields<MoeConfig>{ModelType::kMoe, &partition::FamilyConfigs::moe, kMoeFields});

// visit(row) for every row of kModelFields, in order.
template <typename Visit>
void for_each_model_fields(Visit&& visit) {
  std::apply([&](const auto&... row) { (visit(row), ...); }, kModelFields);
}

// batch.*: any two of the three imply the third (batch.cpp); an unset key stays unset (nullopt).
inline constexpr std::array<Field<BatchConfig>, 3> kBatchFields = {{
    {"global_batch_size", &BatchConfig::global_batch_size, FieldKind::kInteger,
     "samples per optimizer step over all replicas", 1, kMaxGlobalBatch},
    {"micro_batch_size", &BatchConfig::micro_batch_size, FieldKind::kInteger, "samples per micro-batch", 1,
     kMaxBatch},
    {"gradient_accumulation_steps", &BatchConfig::gradient_accumulation_steps, FieldKind::kInteger,
     "micro-batches per replica per step", 1, kMaxBatch},
}};

static_assert(kinds_fit(kBatchFields), "a batch field table row does not match its member's type");

static_assert(kinds_fit(kGptFields) && kinds_fit(kLlamaFields) && kinds_fit(kMoeFields) && kinds_fit(kMlpFields) &&
                  kinds_fit(kCnnFields),
              "a model field table row's kind does not match its member's type, or its meaning is empty");

static_assert(kinds_fit(kParallelFields) && kinds_fit(kPartitionFields) && kinds_fit(kOptimizerFields) &&
                  kinds_fit(kTrainFields) && kinds_fit(kCheckpointFields) && kinds_fit(kDataFields) &&
                  kinds_fit(kDeviceFields),
              "a field table row's kind does not match its member's type, or its meaning is empty");

}  // namespace cleave::config

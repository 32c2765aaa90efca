// RunConfig: the strict JSON run configuration (docs/config.md) as plain structs with defaults.
//
// Invariants:
//  - An empty config `{}` is valid: it trains the default tiny GPT on the synthetic task on one CPU rank.
//  - A RunConfig returned by load_config() / parse_config() has passed every check that needs no world size:
//    unknown, duplicate and mistyped keys, non-positive sizes, enum values, the model's own rules (the
//    checks of partition/model_spec.hpp and partition/tp_rules.hpp, run rather than rewritten: d_model %
//    n_heads, tp dividing n_heads and d_ff, ...), and model/data compatibility. Every error is a
//    cleave::InputError (bad input: `cleave` exits ExitCode::kBadInput, `cleave run` does not restart it) whose
//    one-line message names the key path and the numbers. resolve() adds what needs
//    the world size (data_parallel_size, the batch triple).
//  - to_json() writes every field, so parse_config(to_json(c)) == c (operator== below).
//
// Enum-valued keys are enum classes (engine/config/enums.hpp) parsed once by the reader; nothing downstream
// compares their text.
//
// Extending: add the field to its struct with a default, then add a row to its section's table in fields.hpp
// (read and written from there; model and batch are read in config.cpp and written in write.cpp by hand) and
// to docs/config.md (cross-key rules go in validate.cpp); the round-trip and docs tests catch what is missed.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/config/enums.hpp"
#include "partition/model_spec.hpp"

namespace cleave::config {

// model.*: the family `type` names (partition/families/family.hpp) and every family's config struct (only the
// matching one is read and written; resolved on reading by the family's Family::resolve).
struct ModelConfig : partition::FamilyConfigs {
  ModelType type = ModelType::kGpt;
  friend bool operator==(const ModelConfig&, const ModelConfig&);
};

// A language model's vocabulary and context length (Family::token_sizes); the gpt struct's values for other
// types.
inline std::int64_t token_vocab_size(const ModelConfig& m) {
  const partition::Family& f = partition::family(m.type);
  return f.token_sizes != nullptr ? f.token_sizes(m).vocab_size : m.gpt.vocab_size;
}
inline std::int64_t token_seq_len(const ModelConfig& m) {
  const partition::Family& f = partition::family(m.type);
  return f.token_sizes != nullptr ? f.token_sizes(m).seq_len : m.gpt.seq_len;
}

struct PartitionConfig {
  PartitionMethod method = PartitionMethod::kCost;
  std::vector<std::int64_t> blocks_per_stage;  // manual only: one entry per stage (pp × virtual stages)
  friend bool operator==(const PartitionConfig&, const PartitionConfig&) = default;
};

struct ParallelConfig {
  int tensor_model_parallel_size = 1;
  int pipeline_model_parallel_size = 1;
  int data_parallel_size = -1;  // -1: world size / (tp × cp × pp), filled in by RunConfig::resolve
  int virtual_pipeline_stages = 1;
  std::string schedule = "1f1b";  // a schedule registry name (pipeline/schedules) or a schedule file path
  // schedule "auto" only: live micro-batch stashes (activations of one micro-batch on one stage) each pp rank
  // may hold; 0 = pipeline_model_parallel_size, the memory of 1F1B and ZB-H1; 2 × pp gives ZB-H2's zero bubble.
  int auto_schedule_memory_limit = 0;
  // schedule "auto" only: a profile written by `cleave profile` for this model; the automatic scheduler then
  // builds from its measured F, I, W (at this tp width and micro-batch) and P2P fit. Empty: the cost model's
  // F : I : W ratio. Either way the stages are taken as equal (the partitioner balances them).
  std::string auto_schedule_profile;
  // schedule "auto" only: what a stash still weighs between its I and its W, as a fraction of a whole one (the
  // zero-bubble paper's M_W / M_B; its Table 1 gives 32h / (34h + 5as) for a transformer layer). 1 = this
  // engine's accounting (a stash is whole until its W). Under a fraction < 1 the limit above is counted the
  // paper's way, so a schedule may hold more than the limit's whole stashes in the engine's accounting.
  double auto_schedule_weight_stash_fraction = 1.0;
  // schedule "auto" only: what the search minimises first: the step's makespan (this engine's synchronised
  // optimizer step) or the longest per-rank span (the zero-bubble paper's scheduler's cost).
  AutoScheduleObjectiveChoice auto_schedule_objective = AutoScheduleObjectiveChoice::kMakespan;
  PartitionConfig partition;
  double dp_bucket_mb = 25.0;  // gradient all-reduce bucket size
  // dtype data-parallel gradient buckets travel in: "fp32" (the f32 gradients themselves; what Megatron does
  // for bf16 training) or "bf16" (half the bytes: each bucket is rounded to bf16, reduced with f32 accumulation
  // and widened back).
  GradReduceDtype grad_reduce_dtype = GradReduceDtype::kFp32;
  // Which communicator carries tensors: "mpi" (CPU tensors; GPU tensors staged through pinned host memory),
  // "nccl" (GPU tensors, one GPU per rank; needs a CUDA build and device.type "cuda"), "auto" (nccl for
  // GPU training with a GPU per rank, mpi otherwise).
  CommBackend comm_backend = CommBackend::kAuto;
  // Background progress of MPI transfers while a rank computes (engine/comm/mpi/progress_thread.hpp): "auto"
  // (a progress thread where MPI grants MPI_THREAD_MULTIPLE), "thread" (required; an error where MPI does not
  // allow it), "off". Never changes results, only when bytes move.
  P2PProgress p2p_progress = P2PProgress::kAuto;
  // Megatron's sequence parallelism inside the tp group: the regions tensor parallelism replicates (norms,
  // residuals, dropout-free elementwise work) are split along the sequence; each tp all-reduce becomes a
  // reduce-scatter and an all-gather. Needs tensor_model_parallel_size > 1.
  bool sequence_parallel = false;
  // Context parallelism: every sequence split across this many ranks (grid tp × cp × dp × pp, tp fastest;
  // docs/multi-rank.md#context-parallelism). The ranks exchange keys and values inside attention, by
  // context_parallel_comm: "ring" (K/V blocks rotated point to point; rank r holds chunks r and 2cp-1-r of
  // 2cp, so causal work is balanced) or "all_to_all" (DeepSpeed-Ulysses: heads exchanged for sequence; rank r
  // holds the contiguous chunk r; needs the heads and kv heads per tp rank divisible by cp).
  int context_parallel_size = 1;
  ContextParallelComm context_parallel_comm = ContextParallelComm::kRing;
  // Expert parallelism (model.type moe): each MoE block's experts split over this many ranks, folded out of the
  // dp × cp ranks as Megatron does (docs/multi-rank.md#expert-parallelism): within the dp × cp group (index
  // cp_rank + cp · dp_rank) ep_rank = index mod ep, the expert-data-parallel rank = index / ep. Tokens travel to
  // their experts' ranks and back by all-to-all; expert gradients are reduced over the dp × cp / ep ranks that
  // hold the same experts, every other gradient over dp × cp as without ep. Must divide model.n_experts and
  // dp × cp.
  int expert_model_parallel_size = 1;
  // DualPipeV's overlapped F&B pairs (issue 36 part 6; pipeline/overlap_schedule.hpp): each forward paired with
  // another chunk's backward runs interleaved with it, so one micro-batch's MoE dispatch or combine all-to-all is
  // in flight while the other computes. Results are bit-identical to false. Needs schedule dualpipev and ep > 1.
  bool moe_a2a_overlap = false;
  // Expert parallelism's memory (docs/planner.md "Expert parallelism's memory", partition::EpMemoryImbalance): the
  // routing figures the trainer's own memory plan (device.memory_limit's check, run.json, the report) sizes each
  // rank's routed rows at. Stash S: a rank's rows summed over the blocks it stashes, over their mean; peak P: the
  // busiest block's busiest rank's. 0: the dropless bound min(k, E/ep) · ep / k, which no routing exceeds; else in
  // [1, that bound], P >= S (validate.cpp). Measured from a run's moe_ep_rows_* metrics.
  double ep_stash_imbalance = 0.0;
  double ep_peak_imbalance = 0.0;
  friend bool operator==(const ParallelConfig&, const ParallelConfig&) = default;
};

// Any two of the three imply the third (with dp): global = micro × accumulation × dp. Unset = nullopt.
struct BatchConfig {
  std::optional<std::int64_t> global_batch_size;
  std::optional<std::int64_t> micro_batch_size;
  std::optional<std::int64_t> gradient_accumulation_steps;
  friend bool operator==(const BatchConfig&, const BatchConfig&) = default;
};

// All three batch numbers, consistent with dp_size.
struct ResolvedBatch {
  std::int64_t global_batch_size = 0;
  std::int64_t micro_batch_size = 0;
  std::int64_t gradient_accumulation_steps = 0;
  std::int64_t per_rank() const { return micro_batch_size * gradient_accumulation_steps; }
};

// Fills in the missing batch numbers for `dp_size` data-parallel replicas. Throws Error naming all three
// numbers and dp when they contradict, or when global is not divisible by micro × dp. With none given:
// micro 8, accumulation 1; with one given the other of (micro, accumulation) defaults to 8 / 1.
ResolvedBatch resolve_batch(const BatchConfig& batch, int dp_size);
struct RunConfig;
// A named parallel.schedule (not auto, not a file) that needs more micro-batches per step than the resolved batch
// gives (`num_microbatches`: batch.gradient_accumulation_steps; dualpipev needs 2 × pp): throws InputError naming
// the keys a user sets and values that work, keeping either the global batch or the micro-batch size. A pure
// function of the config and the world size, so RunConfig::resolve refuses it before any work.
void check_schedule_microbatches(const RunConfig& config, std::int64_t num_microbatches);

struct OptimizerConfig {
  OptimizerType type = OptimizerType::kAdamw;
  double lr = 3e-3;  // tuned for the default tiny GPT: synthetic loss 5.55 -> ~1.75 (floor 1.39) in 300 steps
  double weight_decay = 0.01;  // decoupled (AdamW) / L2 added to the gradient (SGD); biases and norms exempt
  std::array<double, 2> betas = {0.9, 0.999};  // adamw
  double eps = 1e-8;                           // adamw
  double momentum = 0.9;                       // sgd
  bool nesterov = false;                       // sgd
  double grad_clip = 1.0;                      // max global gradient norm; 0 = off
  std::int64_t warmup_steps = 10;              // linear warm-up from 0 to lr
  LrScheduleType schedule = LrScheduleType::kCosine;  // decay to min_lr at train.steps
  double min_lr = 0.0;
  int zero_stage = 0;  // 0 | 1 optimizer state | 2 and gradients | 3 and parameters, sharded across dp
  ZeroReduce zero_reduce = ZeroReduce::kAuto;  // ZeRO-2/3: when gradients are reduce-scattered (resolved_zero_reduce)
  // f32 tensors of optimizer state each parameter carries: adamw 2 (exp_avg, exp_avg_sq), sgd with momentum 1
  // (momentum_buffer), plain sgd 0. The one count the memory plan, the planner's step-time model and the
  // data-parallel log use; the optimizers allocate exactly this many (unit Optimizer.FactoryFollowsConfig).
  int state_tensors_per_param() const { return type == OptimizerType::kAdamw ? 2 : (momentum != 0.0 ? 1 : 0); }
  friend bool operator==(const OptimizerConfig&, const OptimizerConfig&) = default;
};

struct TrainConfig {
  std::int64_t steps = 300;
  std::uint64_t seed = 1234;
  std::int64_t log_interval = 10;
  bool deterministic = false;     // canonical-order sums, thread-invariant GEMMs: bit-identical across runs
                                  // and data-parallel layouts (docs/config.md, train.deterministic)
  std::string out_dir = "runs/default";
  double comm_timeout_s = 300.0;  // watchdog: abort a collective or transfer that takes longer
  bool trace = false;             // write per-rank trace.json timelines
  std::int64_t eval_interval = 0;  // evaluate every N steps (0 = only at the end)
  std::int64_t eval_batches = 8;   // global batches per evaluation (0 = no evaluation)
  Recompute recompute = Recompute::kNone;  // gpt transformer blocks (partition/cost_model.hpp)
  bool report = true;              // write report.html into out_dir at the end (cleave report RUN_DIR redoes it)
  // Steps in a row whose loss or gradient norm is not finite that the run survives (each skipped: no update);
  // one more stops it. 0 = the first non-finite step stops the run (its update is never applied).
  std::int64_t skip_nonfinite_steps = 0;
  friend bool operator==(const TrainConfig&, const TrainConfig&) = default;
};

struct CheckpointConfig {
  std::string dir;              // "" = <train.out_dir>/checkpoints (filled in by resolve())
  std::int64_t interval = 0;    // save every N steps (0 = only the final checkpoint)
  std::int64_t keep_last = 0;   // complete checkpoints kept after a save (0 = all)
  bool save_final = true;       // a checkpoint after the last step
  bool background = true;       // train(): write checkpoint files on a thread while the steps go on
  friend bool operator==(const CheckpointConfig&, const CheckpointConfig&) = default;
};

struct DataConfig {
  DataType type = DataType::kSynthetic;
  std::string path;                // text, tokens: required unless paths; digits: defaults to data/digits.csv.gz
  std::vector<std::string> paths;  // tokens: shard files or globs, each one source (instead of path)
  std::vector<double> weights;     // tokens: a weight per entry of paths (empty: every window equally likely)
  std::string val_path;            // text, tokens: evaluation file (else the last val_fraction of path)
  double val_fraction = 0.1;       // held-out tail of the file (digits: default 0.2, its test split)
  TokenFileFormat format = TokenFileFormat::kLlmc;  // tokens only
  friend bool operator==(const DataConfig&, const DataConfig&) = default;
};

struct DeviceConfig {
  DeviceType type = DeviceType::kCpu;
  std::int64_t memory_limit = 0;  // bytes per device, 0 = no cap (JSON: bytes or a string like "512MiB")
  Precision precision = Precision::kFp32;
  CpuBlas blas = CpuBlas::kAuto;  // the CPU backend's GEMM library (kernels/ops/cpu_blas.hpp)
  // Not a config key (no row in kDeviceFields: never read, written or documented as one): the order the CPU's bf16
  // attention sums in, kReordered or kReorderedQuarters in `cleave verify`'s twin references only (kernels/ops/precision.hpp).
  ops::AttentionSums attention_sums = ops::AttentionSums::kKernel;
  friend bool operator==(const DeviceConfig&, const DeviceConfig&) = default;
};

struct RunConfig {
  ModelConfig model;
  ParallelConfig parallel;
  BatchConfig batch;
  OptimizerConfig optimizer;
  TrainConfig train;
  CheckpointConfig checkpoint;
  DataConfig data;
  DeviceConfig device;

  // Fills parallel.data_parallel_size (when -1) from the world size, all three batch numbers and an empty
  // checkpoint.dir (<train.out_dir>/checkpoints). Throws InputError (bad input, exit 64) when world_size is not
  // tp × cp × pp × dp, ep does not divide dp × cp, the batch numbers contradict dp, or a named parallel.schedule
  // needs more micro-batches per step than they give (check_schedule_microbatches). Idempotent.
  void resolve(int world_size);
  // The same for a config read from `origin` (a file name, "<defaults>") with `overrides`: a refusal of a key is
  // worded as the config reader words it, "config ORIGIN: key: ..." or "--set key=value: key: ...".
  void resolve(int world_size, std::string_view origin, const std::vector<std::string>& overrides);
  // The same, a refusal of a key left a ConfigKeyError, for a caller that words where the key came from itself
  // (the plan search: its candidates' keys came from the search or the config); other refusals InputError.
  void resolve_keyed(int world_size);
  // The batch numbers after resolve() (asserts that it ran).
  ResolvedBatch resolved_batch() const;

  friend bool operator==(const RunConfig&, const RunConfig&) = default;
};

// optimizer.zero_reduce as the run applies it: kPerMicrobatch or kPerStep for ZeRO-2 and 3 with dp > 1
// (parallel.data_parallel_size resolved), kAuto otherwise (stages 0 and 1 reduce once per step, all-reduce or
// reduce-scatter, unaffected). kAuto picks per micro-batch except where the per-micro-batch form cannot keep its
// promise: train.deterministic (the canonical summation order sums a replica's micro-batches before the
// replicas, engine/core/sum_tree.hpp) and sequence parallelism at tp > 1 (the tp partial sums of replicated
// parameters run once per step on the whole gradient); validate() refuses an explicit per_microbatch there.
ZeroReduce resolved_zero_reduce(const RunConfig& config);

// Parses a config file (empty path: the defaults) and applies `overrides` ("key.path=value", value parsed
// as JSON when it parses, else taken as a string). Validates everything that needs no world size.
// Input paths (data.path, data.val_path, data.paths) are made absolute: the file's against its directory, a
// --set value's and a default's against the working directory (input_paths.hpp); output paths stay relative to
// the working directory. Bad input is an InputError (engine/core/input_error.hpp: `cleave` exits 64).
RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides = {});
// Same from JSON text; `origin` names it in messages (a file name, "--set", "<string>").
RunConfig parse_config(std::string_view json_text, std::string_view origin = "<string>",
                       const std::vector<std::string>& overrides = {});
// The fully resolved config as pretty-printed JSON text (every key, defaults included).
std::string to_json(const RunConfig& config);

// The cross-key checks parse_config() runs after reading every key: the model's own rules, recompute and
// partition against the model and stages, schedule names, the comm backend this build can give, optimizer,
// data/model compatibility and the evaluation split. For a RunConfig built or edited in code (the planner's
// candidates) without going back to text. Throws ConfigKeyError (key, detail); parse_config() reports the
// same error prefixed with where the key came from ("config run.json: ..." or "--set key=value: ...").
void validate(const RunConfig& config);
// The files a config names that are read whole when the run starts, read now (parse_config runs it after
// validate(); the planner's candidates, which share their base's files, do not): a parallel.schedule file must parse
// (the text form, docs/schedules.md), parallel.auto_schedule_profile must be a `cleave profile` file with measured
// costs. Throws ConfigKeyError naming the key, the path and the fix.
void check_named_files(const RunConfig& config);
// Keys that would have no effect in the layout the config sets (parallel.context_parallel_comm other than ring at
// context_parallel_size 1): parse_config runs it after validate(); the planner's candidates do not. Throws
// ConfigKeyError.
void check_keys_take_effect(const RunConfig& config);
// The keys whose documented convention is to do nothing in this config's mode (another optimizer's hyperparameters,
// min_lr under a constant schedule, zero_reduce below ZeRO-2, eval_interval with evaluation off, val_fraction beside
// a val_path, device.blas on cuda, checkpoint.keep_last / background / dir when checkpoint.interval 0 and save_final
// false save nothing), each as one line naming the key, its value and why: the run logs each once.
std::vector<std::string> keys_without_effect(const RunConfig& config);
// What a layout is, once the world is known: keys_without_effect_in_layout's facts.
struct LayoutFacts {
  int world_size = 1;
  int stages = 1;             // pipeline stages of the model (pp x virtual stages)
  int reducing_replicas = 1;  // dp x cp: the ranks a gradient is reduced over
};
// The keys that do nothing in the layout the run got (parallel.partition.method with one stage, p2p_progress
// "thread" at world size 1, dp_bucket_mb, grad_reduce_dtype and optimizer.zero_stage with no replica to reduce or
// shard over), one line each
// naming the key, its value and why: the run logs each once, beside keys_without_effect's.
std::vector<std::string> keys_without_effect_in_layout(const RunConfig& config, const LayoutFacts& layout);
// The message parse_config() gives for `error` when the config came from `origin` (a file name, "<defaults>")
// with `overrides` applied: "--set key=value: key: detail" when an override set the key (or a parent or child of
// it), else "config ORIGIN: key: detail". For errors of a config edited in code whose edits read as overrides.
std::string keyed_message(const ConfigKeyError& error, std::string_view origin,
                          const std::vector<std::string>& overrides);

}  // namespace cleave::config

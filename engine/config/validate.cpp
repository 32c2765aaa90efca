// Cross-key validation of a RunConfig (config.hpp, validate()): the checks that need more than one key. The
// model's own rules are partition's (its spec builders and tensor-parallel rules, run here rather than
// rewritten); the comm backend rule is comm_backend.hpp's; schedule names are the schedule registry's. Each
// refusal is a ConfigKeyError naming the key; parse_config() prefixes where the key came from.
// The notes on keys that would do nothing (never refusals) are keys_without_effect.cpp's.
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "cleave/config.hpp"
#include "engine/config/comm_backend.hpp"
#include "engine/config/config.hpp"
#include "engine/core/edit_distance.hpp"
#include "engine/core/error.hpp"
#include "kernels/ops/attention_limits.hpp"
#include "partition/cp_rules.hpp"
#include "partition/ep_costs.hpp"
#include "partition/ep_rules.hpp"
#include "partition/families/family.hpp"
#include "partition/hardware_profile.hpp"
#include "partition/tp_rules.hpp"
#include "pipeline/schedule_text.hpp"
#include "pipeline/schedules/schedules.hpp"

namespace cleave::config {
namespace {

// A cross-key check failed: validate() throws ConfigKeyError; parse_config() adds where the key came from.
template <typename... Args>
[[noreturn]] void refuse(std::string_view key, fmt::format_string<Args...> format, Args&&... args) {
  throw ConfigKeyError(std::string(key), fmt::format(format, std::forward<Args>(args)...));
}

// "\"gpt\" or \"llama\"": the quoted names of the families for which `has` holds.
std::string quoted_family_names(bool (*has)(const partition::Family&)) {
  return partition::family_names(has, "or", /*quoted=*/true);
}

// The model's own rules (partition/model_spec.hpp, partition/tp_rules.hpp): the spec builder and the
// tensor-parallel check throw ConfigKeyError naming the key. Config
// keeps no copy of these rules.
void check_model_rules(const RunConfig& c) {
  const auto& m = c.model;
  const partition::ModelSpec spec = partition::make_model_spec(m.type, m);
  partition::check_tensor_parallel(spec, c.parallel.tensor_model_parallel_size);
  partition::check_sequence_parallel(spec, c.parallel.tensor_model_parallel_size, c.parallel.sequence_parallel);
  partition::check_context_parallel(spec, c.parallel.tensor_model_parallel_size, c.parallel.context_parallel_size,
                                    c.parallel.context_parallel_comm == ContextParallelComm::kRing,
                                    c.parallel.sequence_parallel && c.parallel.tensor_model_parallel_size > 1);
  // dp is known here only when set (-1: inferred at resolve(), which runs the dp × cp rule again).
  partition::check_expert_parallel(spec, c.parallel.expert_model_parallel_size, c.parallel.data_parallel_size,
                                   c.parallel.context_parallel_size);
}

// parallel.ep_stash_imbalance and ep_peak_imbalance: 0 (the dropless bound) or a rank's rows over the mean, so at
// least 1 and at most the bound no routing exceeds at the layout's ep (partition::workload_ep_row_bound), the peak
// (one block's busiest rank) no lower than the stash (a mean over blocks). Only under expert parallelism: at ep 1
// every rank holds every expert and the plan reads neither key (run_plan::ep_memory_figures), so any value there is
// refused alike, 1 included (as parallel.context_parallel_comm is at cp 1).
void check_ep_memory_figures(const RunConfig& c) {
  const auto& p = c.parallel;
  if (p.ep_stash_imbalance == 0 && p.ep_peak_imbalance == 0) return;
  const partition::ModelSpec spec = partition::make_model_spec(c.model.type, c.model);
  const int ep = p.expert_model_parallel_size;
  const double bound = partition::workload_ep_row_bound(spec, ep);
  for (const auto& [key, value] : {std::pair{"parallel.ep_stash_imbalance", p.ep_stash_imbalance},
                                   std::pair{"parallel.ep_peak_imbalance", p.ep_peak_imbalance}}) {
    if (value == 0) continue;
    if (partition::routed_experts(spec) == 0) {
      refuse(key, "{} sizes expert parallelism's routed rows, and model.type {} has no experts; drop the key (or 0)",
             value, c.model.type);
    }
    if (ep == 1) refuse(key, "{}", partition::ep_figure_at_ep_one(value, "remove the key (or 0)"));
    if (value < 1) {
      refuse(key, "{} is below 1 (a rank's routed rows over the mean rank's); give a value >= 1, or 0 for the "
             "dropless bound {:g}", value, bound);
    }
    if (value > bound) {
      const auto moe = std::find_if(spec.blocks.begin(), spec.blocks.end(),
                                    [](const partition::BlockSpec& b) { return b.n_experts > 0; });
      refuse(key, "{} is above the dropless bound {:g} = min(top_k, n_experts / ep) × ep / top_k at "
             "parallel.expert_model_parallel_size {} (model.n_experts {}, model.top_k {}): no routing gives a rank "
             "more rows; give a value in [1, {:g}], or 0 for the bound", value, bound, ep, moe->n_experts,
             moe->top_k, bound);
    }
  }
  if (p.ep_stash_imbalance > 0 && p.ep_peak_imbalance > 0 && p.ep_peak_imbalance < p.ep_stash_imbalance) {
    refuse("parallel.ep_peak_imbalance", "{} is below parallel.ep_stash_imbalance {}: the busiest block's rows bound "
           "every block's, so their mean too; give a peak >= the stash, or 0 for the bound", p.ep_peak_imbalance,
           p.ep_stash_imbalance);
  }
}

// The layout: dp size, the model's rules, the MoE overlap's schedule, recomputation, the manual partition.
void check_layout(const RunConfig& c) {
  const auto& p = c.parallel;
  if (p.data_parallel_size == 0) {
    refuse("parallel.data_parallel_size", "must be -1 (inferred from the world size) or positive, got 0");
  }
  check_model_rules(c);
  if (p.moe_a2a_overlap && (p.schedule != "dualpipev" || p.expert_model_parallel_size < 2)) {
    refuse("parallel.moe_a2a_overlap", "true needs parallel.schedule \"dualpipev\" and parallel.expert_model_parallel_size "
           "> 1 (it overlaps DualPipeV's F&B pairs' MoE all-to-alls), got schedule \"{}\" and ep {}; set it false",
           p.schedule, p.expert_model_parallel_size);
  }
  check_ep_memory_figures(c);
  if (c.train.recompute != Recompute::kNone && !partition::is_language_model(c.model.type)) {
    refuse("train.recompute", "\"{}\" recomputes transformer blocks, and model.type {} has none; use \"none\"",
         c.train.recompute, c.model.type);
  }
  if (!p.partition.blocks_per_stage.empty()) {
    if (p.partition.method != PartitionMethod::kManual) {
      refuse("parallel.partition.blocks_per_stage", "only used with method \"manual\" (method is \"{}\")",
           p.partition.method);
    }
    // The stages the run will cut: 1 virtual stage means the schedule's default, 2 for the two-chunk schedules
    // (run_plan::effective_virtual_stages), so zb_v at pp 2 cuts 4 stages and needs 4 entries.
    const bool schedule_default = p.virtual_pipeline_stages == 1 && pipeline::is_schedule_name(p.schedule);
    const int virtual_stages =
        schedule_default ? pipeline::default_virtual_stages(p.schedule) : p.virtual_pipeline_stages;
    const std::size_t stages = static_cast<std::size_t>(p.pipeline_model_parallel_size) *
                               static_cast<std::size_t>(virtual_stages);
    if (p.partition.blocks_per_stage.size() != stages) {
      const std::string per_rank =
          schedule_default && virtual_stages > 1
              ? fmt::format("{} stages per rank (parallel.schedule \"{}\")", virtual_stages, p.schedule)
              : fmt::format("virtual_pipeline_stages {}", virtual_stages);
      refuse("parallel.partition.blocks_per_stage",
           "has {} entries, expected pipeline_model_parallel_size {} × {} = {}", p.partition.blocks_per_stage.size(),
           p.pipeline_model_parallel_size, per_rank, stages);
    }
    // The stages cover the model's blocks (Family::blocks_are says which they are), refused here rather than by the
    // partitioner once the world is up.
    const std::size_t blocks = partition::make_model_spec(c.model.type, c.model).blocks.size();
    const std::int64_t sum = std::accumulate(p.partition.blocks_per_stage.begin(), p.partition.blocks_per_stage.end(),
                                             std::int64_t{0});
    if (sum != static_cast<std::int64_t>(blocks)) {
      refuse("parallel.partition.blocks_per_stage", "[{}] covers {} blocks, and model.type {} has {}: {} (sum {} != "
             "{}); give entries that sum to {}", fmt::join(p.partition.blocks_per_stage, ","), sum, c.model.type,
             blocks, partition::family(c.model.type).blocks_are, sum, blocks, blocks);
    }
  } else if (p.partition.method == PartitionMethod::kManual) {
    refuse("parallel.partition.blocks_per_stage", "missing; required with method \"manual\" (one block count per stage)");
  }
}

// parallel.schedule names a registered schedule or a schedule file; the auto_schedule_* keys, when set away from
// their defaults, need schedule "auto".
void check_schedule(const ParallelConfig& p) {
  if (!pipeline::is_schedule_name(p.schedule) && !std::filesystem::is_regular_file(p.schedule)) {
    const std::vector<std::string_view> names = pipeline::schedule_names();
    std::string_view closest;
    std::size_t best = std::numeric_limits<std::size_t>::max();
    for (std::string_view name : names) {
      if (const std::size_t d = edit_distance(p.schedule, name); d < best) best = d, closest = name;
    }
    refuse("parallel.schedule", "\"{}\" is neither a schedule ({}) nor an existing schedule file{}", p.schedule,
         fmt::join(names, ", "), best <= 3 ? fmt::format(" (did you mean \"{}\"?)", closest) : std::string());
  }
  // 1 is every schedule's default (run_plan picks 2 for the two-chunk schedules); another count the schedule cannot
  // run is a rule of these two keys alone, refused here rather than once the world is up.
  if (p.virtual_pipeline_stages > 1 && pipeline::is_schedule_name(p.schedule)) {
    try {
      pipeline::check_virtual_stages(p.schedule, p.virtual_pipeline_stages);
    } catch (const Error& e) {
      // zb_v and dualpipev run exactly 2 (the sweep found the message naming interleaved_1f1b alone at 2).
      refuse("parallel.virtual_pipeline_stages", "{} (parallel.schedule \"{}\"); set it to 1 (the schedule's default) "
             "or choose a schedule that runs {} stages per rank ({})", e.what(), p.schedule, p.virtual_pipeline_stages,
             p.virtual_pipeline_stages == 2 ? "interleaved_1f1b, zb_v or dualpipev" : "interleaved_1f1b");
    }
  }
  const auto only_with_auto = [&](std::string_view key, bool set) {
    if (set && p.schedule != "auto") {
      refuse(key, "applies only to parallel.schedule \"auto\" (the automatic scheduler), but the schedule is \"{}\"",
             p.schedule);
    }
  };
  only_with_auto("parallel.auto_schedule_profile", !p.auto_schedule_profile.empty());
  only_with_auto("parallel.auto_schedule_memory_limit", p.auto_schedule_memory_limit != 0);
  only_with_auto("parallel.auto_schedule_weight_stash_fraction", p.auto_schedule_weight_stash_fraction != 1.0);
  only_with_auto("parallel.auto_schedule_objective",
                 p.auto_schedule_objective != AutoScheduleObjectiveChoice::kMakespan);
}

// What the device's kernels serve: a head dimension above attention's limit on device.type would fail at the first
// forward, after the model was built and moved to the device (kernels/ops/attention_limits.hpp).
void check_device_kernels(const RunConfig& c) {
  const std::int64_t limit = ops::attention_max_head_dim(c.device.type);
  const partition::Family& family = partition::family(c.model.type);
  if (limit <= 0 || family.token_sizes == nullptr) return;
  const partition::TokenSizes sizes = family.token_sizes(c.model);
  if (sizes.n_heads <= 0 || sizes.d_model / sizes.n_heads <= limit) return;
  refuse("model.n_heads", "{} heads of d_model {} have {} dimensions each; attention on device.type \"cuda\" serves at "
         "most {} (its kernels' limit): use more heads (at least {}) or device.type \"cpu\"",
         sizes.n_heads, sizes.d_model, sizes.d_model / sizes.n_heads, limit, (sizes.d_model + limit - 1) / limit);
}

// The comm backend and the CPU BLAS: what is known before launch (build, device type); the factory adds the
// per-rank GPU probe.
void check_backends(const RunConfig& c) {
  CommBackendFacts facts;
  facts.cuda_build = CLEAVE_WITH_CUDA != 0;
  facts.device_type = c.device.type;
  (void)choose_comm_backend(c.parallel.comm_backend, facts);
  if (!ops::cpu_blas_built(c.device.blas)) {
    refuse("device.blas", "\"{}\" is not built into this cleave (CMake did not find the library: install it with "
           "scripts/install-deps.sh and rebuild; `cmake` prints which GEMM libraries it found); available: {}",
           c.device.blas, ops::cpu_blas_available());
  }
}

// The optimizer: learning rates, the ZeRO stage and its reduction, Nesterov momentum.
void check_optimizer(const RunConfig& c) {
  const auto& o = c.optimizer;
  if (o.min_lr > o.lr) refuse("optimizer.min_lr", "{} is larger than optimizer.lr {}", o.min_lr, o.lr);
  if (o.zero_stage > 3) {
    refuse("optimizer.zero_stage", "must be 0 (nothing sharded), 1 (optimizer state), 2 (and gradients) or 3 (and "
           "parameters), got {}", o.zero_stage);
  }
  if (o.zero_stage >= 2 && o.zero_reduce == ZeroReduce::kPerMicrobatch) {
    if (c.train.deterministic) {
      refuse("optimizer.zero_reduce", "per_microbatch cannot keep train.deterministic's bit-identity: the canonical "
             "order sums each replica's micro-batches before the replicas, a reduce-scatter per micro-batch sums the "
             "replicas first; set optimizer.zero_reduce per_step (or auto, which picks it under deterministic mode)");
    }
    if (c.parallel.sequence_parallel && c.parallel.tensor_model_parallel_size > 1) {
      refuse("optimizer.zero_reduce", "per_microbatch is not supported with parallel.sequence_parallel at tp {} (the "
             "tp partial sums of replicated parameters run once per step); set optimizer.zero_reduce per_step or auto",
             c.parallel.tensor_model_parallel_size);
    }
  }
  if (o.type == OptimizerType::kSgd && o.nesterov && o.momentum == 0.0) {
    refuse("optimizer.nesterov", "needs optimizer.momentum > 0 (momentum is 0)");
  }
  // Accepted, it would do nothing: only SGD has Nesterov momentum (the written default, false, passes).
  if (o.type != OptimizerType::kSgd && o.nesterov) {
    refuse("optimizer.nesterov", "is SGD's Nesterov momentum, and optimizer.type is \"{}\"; set it false, or "
           "optimizer.type \"sgd\"", o.type);
  }
}

// Where the data comes from: data.path or data.paths (with their weights), never both, each given.
void check_data_paths(const DataConfig& d) {
  // data.format says how token files are laid out; no other source reads one.
  if (d.format != DataConfig{}.format && d.type != DataType::kTokens) {
    refuse("data.format", "\"{}\" is the layout of a token file, and data.type is \"{}\", which reads none; set "
           "data.type \"tokens\", or remove data.format", d.format, d.type);
  }
  if (!d.paths.empty() && d.type != DataType::kTokens) {
    refuse("data.paths", "is for data.type \"tokens\" (data.type is \"{}\"); use data.path", d.type);
  }
  if (!d.paths.empty() && !d.path.empty()) {
    refuse("data.paths", "is set, and so is data.path \"{}\"; give one: remove data.path from the config or clear "
           "it with --set data.path= (data.paths: a list of shards or globs)",
           d.path);
  }
  // Synthetic data reads no file: a path given with it would be ignored, and the run would train on generated
  // samples while the config names a corpus (data.type forgotten, its default being "synthetic").
  for (const auto& [key, value] : {std::pair<const char*, const std::string*>{"data.path", &d.path},
                                   std::pair<const char*, const std::string*>{"data.val_path", &d.val_path}}) {
    if (d.type == DataType::kSynthetic && !value->empty()) {
      refuse(key, "\"{}\" is set, but data.type is \"synthetic\" (given, or by default), which generates its samples and "
             "reads no file; set data.type to \"text\" or \"tokens\" to train on the file, or clear {} (--set {}=) "
             "to train on synthetic data", *value, key, key);
    }
  }
  if ((d.type == DataType::kText || d.type == DataType::kTokens) && d.path.empty() && d.paths.empty()) {
    refuse("data.path", "missing; required for data.type \"{}\"{}", d.type,
           d.type == DataType::kTokens ? " (or data.paths, a list of shards or globs)" : "");
  }
  for (std::size_t i = 0; i < d.paths.size(); ++i) {
    if (d.paths[i].empty()) refuse(fmt::format("data.paths[{}]", i), "is empty; expected a shard file or a glob");
  }
  if (!d.weights.empty()) {
    if (d.paths.empty()) refuse("data.weights", "needs data.paths (a weight for each of its entries)");
    if (d.weights.size() != d.paths.size()) {
      refuse("data.weights", "has {} entries but data.paths has {}; give one weight per entry of data.paths (or no "
             "weights: every window of every shard equally likely)", d.weights.size(), d.paths.size());
    }
    double sum = 0;
    for (double w : d.weights) sum += w;
    if (!(sum > 0)) {
      refuse("data.weights", "sum to {}; at least one weight must be positive (weights are relative: [0.3, 0.7] "
             "and [3, 7] sample alike)", sum);
    }
  }
}

// The data against the model (text and tokens need a language model, digits a classifier of 10 classes) and the
// evaluation split.
void check_data_for_model(const RunConfig& c) {
  const auto& d = c.data;
  if (d.type == DataType::kText || d.type == DataType::kTokens) {
    if (!partition::is_language_model(c.model.type)) {
      refuse("data.type", "\"{}\" needs model.type {} (model.type is \"{}\")", d.type,
             quoted_family_names([](const partition::Family& f) { return f.language_model; }), c.model.type);
    }
    const std::int64_t vocab = token_vocab_size(c.model);
    if (d.type == DataType::kText && vocab < 256) {
      refuse("model.vocab_size", "{} is too small: data.type \"text\" uses byte tokens 0..255 (needs ≥ 256)", vocab);
    }
  }
  if (d.type == DataType::kDigits) {
    const partition::Family& family = partition::family(c.model.type);
    if (family.check_digits_input == nullptr) {
      refuse("data.type", "\"digits\" needs model.type {} (model.type is \"{}\")",
             quoted_family_names([](const partition::Family& f) { return f.check_digits_input != nullptr; }),
             c.model.type);
    }
    family.check_digits_input(c.model);
    const std::int64_t classes = family.classifier(c.model).classes;
    if (classes < 10) refuse("model.num_classes", "{} is fewer than the 10 digit classes", classes);
  }
  const bool has_eval_split = d.type == DataType::kSynthetic || !d.val_path.empty() || d.val_fraction > 0.0;
  if (!has_eval_split && c.train.eval_batches > 0) {
    refuse("train.eval_batches", "{} batches asked for, but there is no evaluation data (data.val_fraction is 0 and data.val_path "
         "is empty); set train.eval_batches=0 or give an evaluation split", c.train.eval_batches);
  }
  if (d.type == DataType::kDigits && !d.val_path.empty()) {
    refuse("data.val_path", "not used with data.type \"digits\" (its test split is the last "
         "data.val_fraction of the file)");
  }
}

}  // namespace

// The checks run in this order, and the first refusal is the one reported.
void validate(const RunConfig& c) {
  check_layout(c);
  check_schedule(c.parallel);
  check_device_kernels(c);
  check_backends(c);
  check_optimizer(c);
  if (c.train.out_dir.empty()) refuse("train.out_dir", "must not be empty");
  check_data_paths(c.data);
  check_data_for_model(c);
}

// parallel.auto_schedule_profile is read when the schedule is built, after the world is up: a missing or malformed
// file would exit 1 there (and `cleave run` would restart into it). Read here it is bad input, before any work.
void check_named_files(const RunConfig& c) {
  // A schedule file (check_schedule: it exists) is parsed now: a malformed one exited 1 once the world was up.
  if (!pipeline::is_schedule_name(c.parallel.schedule)) {
    try {
      static_cast<void>(pipeline::load_schedule(c.parallel.schedule));
    } catch (const Error& e) {
      refuse("parallel.schedule", "{}; fix the file (docs/schedules.md, the text form) or name a schedule ({})",
             e.what(), fmt::join(pipeline::schedule_names(), ", "));
    }
  }
  const std::string& path = c.parallel.auto_schedule_profile;
  if (path.empty()) return;
  partition::HardwareProfile profile;
  try {
    profile = partition::load_profile(path);
  } catch (const Error& e) {
    refuse("parallel.auto_schedule_profile", "{}; give a file `cleave profile CONFIG` wrote (relative paths are read "
           "from the working directory), or clear the key (--set parallel.auto_schedule_profile=) to use the cost "
           "model's F : I : W ratio", e.what());
  }
  if (!profile.measured.has_blocks()) {
    refuse("parallel.auto_schedule_profile", "profile {} has no measured costs (a shipped hardware profile, or no "
           "block table); write one with `cleave profile CONFIG`, or clear the key to use the cost model's ratio",
           path);
  }
}

// Keys that, as given, would do nothing in the layout the same config sets. Read-time only: the planner's candidates
// pass through validate() alone, and its plans write these keys in their effective form (cp 1: ring).
void check_keys_take_effect(const RunConfig& c) {
  const auto& p = c.parallel;
  if (p.context_parallel_size == 1 && p.context_parallel_comm != ContextParallelComm::kRing) {
    refuse("parallel.context_parallel_comm", "\"{}\" is how context-parallel ranks exchange keys and values, and "
           "parallel.context_parallel_size is 1 (no context parallelism); set context_parallel_size > 1, or remove "
           "the key", p.context_parallel_comm);
  }
}

ZeroReduce resolved_zero_reduce(const RunConfig& config) {
  const auto& p = config.parallel;
  if (config.optimizer.zero_stage < 2 || p.data_parallel_size * p.context_parallel_size <= 1) return ZeroReduce::kAuto;
  if (config.optimizer.zero_reduce != ZeroReduce::kAuto) return config.optimizer.zero_reduce;
  const bool sequence_parallel = p.sequence_parallel && p.tensor_model_parallel_size > 1;
  return config.train.deterministic || sequence_parallel ? ZeroReduce::kPerStep : ZeroReduce::kPerMicrobatch;
}

}  // namespace cleave::config

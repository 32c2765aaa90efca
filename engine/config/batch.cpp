// Batch arithmetic (config.hpp): the batch triple from any two of its numbers and the data-parallel size,
// RunConfig::resolve() against the world size (with the model rules that need dp: expert parallelism, the sigmoid
// router's bias under ZeRO-3), and resolved_batch(). Products are refused past 2^62 samples
// rather than overflowing int64.
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "engine/config/config.hpp"
#include "engine/core/english.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "partition/ep_rules.hpp"
#include "partition/families/family.hpp"
#include "pipeline/schedules/schedules.hpp"

namespace cleave::config {
namespace {

// micro × accumulation × dp (all >= 1), refused past 2^62 samples instead of overflowing int64.
std::int64_t batch_product(std::int64_t micro, std::int64_t accumulation, std::int64_t dp) {
  constexpr std::int64_t kLimit = std::int64_t{1} << 62;
  CLEAVE_CHECK(micro <= kLimit / accumulation && micro * accumulation <= kLimit / dp,
               "batch: micro_batch_size {} × gradient_accumulation_steps {} × data-parallel size {} is beyond 2^62 "
               "samples per step",
               micro, accumulation, dp);
  return micro * accumulation * dp;
}

}  // namespace

ResolvedBatch resolve_batch(const BatchConfig& batch, int dp_size) {
  CLEAVE_ASSERT(dp_size >= 1, "resolve_batch with dp_size {}", dp_size);
  const std::int64_t dp = dp_size;
  const auto& g = batch.global_batch_size;
  const auto& m = batch.micro_batch_size;
  const auto& a = batch.gradient_accumulation_steps;
  ResolvedBatch r;
  if (g && m && a) {
    const std::int64_t product = batch_product(*m, *a, dp);
    CLEAVE_CHECK(*g == product,
                 "batch: global_batch_size {} != micro_batch_size {} × gradient_accumulation_steps {} × data-parallel "
                 "size {} = {}; drop one of the three to have it computed",
                 *g, *m, *a, dp, product);
    r = {*g, *m, *a};
  } else if (g && m) {
    CLEAVE_CHECK(*g % (*m * dp) == 0,
                 "batch: global_batch_size {} is not divisible by micro_batch_size {} × data-parallel size {} = {} "
                 "(gradient_accumulation_steps would be {:.4g})",
                 *g, *m, dp, *m * dp, static_cast<double>(*g) / static_cast<double>(*m * dp));
    r = {*g, *m, *g / (*m * dp)};
  } else if (g && a) {
    CLEAVE_CHECK(*g % (*a * dp) == 0,
                 "batch: global_batch_size {} is not divisible by gradient_accumulation_steps {} × data-parallel size "
                 "{} = {} (micro_batch_size would be {:.4g})",
                 *g, *a, dp, *a * dp, static_cast<double>(*g) / static_cast<double>(*a * dp));
    r = {*g, *g / (*a * dp), *a};
  } else if (g) {
    CLEAVE_CHECK(*g % dp == 0,
                 "batch: global_batch_size {} is not divisible by data-parallel size {} (with "
                 "gradient_accumulation_steps 1, micro_batch_size would be {:.4g})",
                 *g, dp, static_cast<double>(*g) / static_cast<double>(dp));
    r = {*g, *g / dp, 1};
  } else {
    const std::int64_t micro = m.value_or(8);
    const std::int64_t accumulation = a.value_or(1);
    r = {batch_product(micro, accumulation, dp), micro, accumulation};
  }
  return r;
}

namespace {

// "1, 2, 3, 6": the rank counts that divide `world` (a product of parallel sizes that fits it).
std::string divisors_of(std::int64_t world) {
  std::string out;
  for (std::int64_t d = 1; d <= world; ++d) {
    if (world % d == 0) out += fmt::format("{}{}", out.empty() ? "" : ", ", d);
  }
  return out;
}

// The key a world size that tp × cp × pp does not divide is refused under (so the refusal says where it came from,
// "config FILE: key: ..." or "--set key=value: key: ..."): the first of cp, pp and tp whose size alone does not divide
// the world, else (each divides, their product does not) the largest of them.
std::string_view world_layout_key(std::int64_t tp, std::int64_t cp, std::int64_t pp, std::int64_t world) {
  const std::pair<std::string_view, std::int64_t> sizes[] = {{"parallel.context_parallel_size", cp},
                                                              {"parallel.pipeline_model_parallel_size", pp},
                                                              {"parallel.tensor_model_parallel_size", tp}};
  for (const auto& [key, size] : sizes) {
    if (world % size != 0) return key;
  }
  const auto* largest = &sizes[0];
  for (const auto& s : sizes) {
    if (s.second > largest->second) largest = &s;
  }
  return largest->first;
}

// The layout keys against the world size: tp × cp × pp divides it and an explicit dp is what it leaves. Refusals are
// ConfigKeyErrors (the caller adds where the key came from).
int data_parallel_size_of(const ParallelConfig& parallel, int world_size) {
  const std::int64_t tp = parallel.tensor_model_parallel_size;  // 64-bit: tp × cp × pp may pass INT_MAX
  const std::int64_t pp = parallel.pipeline_model_parallel_size;
  const std::int64_t cp = parallel.context_parallel_size;
  const std::int64_t model = tp * cp * pp;
  if (cp == 1) {
    CLEAVE_CHECK_KEY(world_size % model == 0, std::string(world_layout_key(tp, cp, pp, world_size)),
                 "world size {} is not divisible by tp({}) × pp({}) = {} (parallel.tensor_model_parallel_size × "
                 "parallel.pipeline_model_parallel_size); launch a multiple of {} ranks, or set tp × pp to a "
                 "divisor of {} ({})",
                 world_size, tp, pp, model, model, world_size, divisors_of(world_size));
  } else {
    CLEAVE_CHECK_KEY(world_size % model == 0, std::string(world_layout_key(tp, cp, pp, world_size)),
                 "world size {} is not divisible by tp({}) × cp({}) × pp({}) = {} (parallel.context_parallel_size = "
                 "{}); launch a multiple of {} ranks{}",
                 world_size, tp, cp, pp, model, cp, model,
                 world_size % (tp * pp) == 0
                     ? (world_size / (tp * pp) == 1
                            ? std::string(", or set parallel.context_parallel_size to 1")
                            : fmt::format(", or set parallel.context_parallel_size to a divisor of {}",
                                          world_size / (tp * pp)))
                     : fmt::format(", or set tp × cp × pp to a divisor of {} ({})", world_size,
                                   divisors_of(world_size)));
  }
  const int dp = static_cast<int>(world_size / model);
  if (parallel.data_parallel_size != -1) {
    CLEAVE_CHECK_KEY(parallel.data_parallel_size == dp, "parallel.data_parallel_size",
                 "{}, but world size {} / (tp {} × cp {} × pp {}) = {}; launch {} or set it to -1",
                 parallel.data_parallel_size, world_size, tp, cp, pp, dp,
                 count_of(model * parallel.data_parallel_size, "rank"));
  }
  return dp;
}

// Empty when the named schedule has the micro-batches it needs; else the refusal after "parallel.schedule ".
std::string schedule_microbatch_shortfall(const RunConfig& config, std::int64_t num_microbatches) {
  const std::string& name = config.parallel.schedule;
  if (name == "auto" || !pipeline::is_schedule_name(name)) return {};  // auto and a schedule file: their builders
  const int pp = config.parallel.pipeline_model_parallel_size;
  const std::int64_t need = pipeline::schedule_min_microbatches(name, pp);
  if (num_microbatches >= need) return {};
  const ResolvedBatch b = config.resolved_batch();
  const std::int64_t dp = config.parallel.data_parallel_size;
  const std::int64_t per_replica = b.global_batch_size / dp;
  std::string keep_global;
  for (std::int64_t a = need; a <= per_replica; ++a) {
    if (per_replica % a != 0) continue;
    keep_global = fmt::format("keep the global batch with --set batch.micro_batch_size={} --set "
                              "batch.gradient_accumulation_steps={}, or ",
                              per_replica / a, a);
    break;
  }
  return fmt::format(
      "{} needs at least {} micro-batches per step on pp_size {}, got {} "
      "(batch.global_batch_size {} / (batch.micro_batch_size {} × data-parallel size {})); {}keep the "
      "micro-batch with --set batch.global_batch_size={} --set batch.gradient_accumulation_steps={}, or "
      "choose another parallel.schedule",
      name, need, pp, num_microbatches, b.global_batch_size, b.micro_batch_size, dp, keep_global,
      b.micro_batch_size * need * dp, need);
}

// resolve()'s rules; a keyed refusal stays a ConfigKeyError, so the caller can say where its key came from.
void resolve_against_world(RunConfig& c, int world_size) {
  const int dp = data_parallel_size_of(c.parallel, world_size);
  c.parallel.data_parallel_size = dp;
  const int cp = c.parallel.context_parallel_size;
  if (c.parallel.expert_model_parallel_size > 1) {  // ep is taken from dp × cp, known only now
    partition::check_expert_parallel(partition::make_model_spec(c.model.type, c.model),
                                     c.parallel.expert_model_parallel_size, dp, cp);
  }
  if (const auto check = partition::family(c.model.type).check_data_parallel) {  // needs dp, known only now
    check(c.model, c.optimizer.zero_stage, dp, cp);
  }
  if (c.checkpoint.dir.empty()) c.checkpoint.dir = (std::filesystem::path(c.train.out_dir) / "checkpoints").string();
  const ResolvedBatch r = resolve_batch(c.batch, dp);
  c.batch = {r.global_batch_size, r.micro_batch_size, r.gradient_accumulation_steps};
  const std::string shortfall = schedule_microbatch_shortfall(c, r.gradient_accumulation_steps);
  if (!shortfall.empty()) throw ConfigKeyError("parallel.schedule", shortfall);
}

}  // namespace

void check_schedule_microbatches(const RunConfig& config, std::int64_t num_microbatches) {
  const std::string shortfall = schedule_microbatch_shortfall(config, num_microbatches);
  if (!shortfall.empty()) throw InputError("parallel.schedule " + shortfall);
}

void RunConfig::resolve(int world_size) {
  CLEAVE_CHECK(world_size >= 1, "world size must be positive, got {}", world_size);
  // Every rule below is this config against the world size, a pure function of both: bad input (InputError, exit
  // 64) that every rank finds alike, so a command may run it before any work with no word between the ranks.
  try {
    resolve_against_world(*this, world_size);
  } catch (const InputError&) {
    throw;
  } catch (const Error& e) {
    throw InputError(e.what());
  }
}

void RunConfig::resolve_keyed(int world_size) {
  CLEAVE_CHECK(world_size >= 1, "world size must be positive, got {}", world_size);
  try {
    resolve_against_world(*this, world_size);
  } catch (const InputError&) {
    throw;
  } catch (const ConfigKeyError&) {
    throw;
  } catch (const Error& e) {
    throw InputError(e.what());
  }
}

void RunConfig::resolve(int world_size, std::string_view origin, const std::vector<std::string>& overrides) {
  try {
    resolve_keyed(world_size);
  } catch (const ConfigKeyError& e) {
    throw InputError(keyed_message(e, origin, overrides));  // "config FILE: key: ..." as the config reader words it
  }
}

ResolvedBatch RunConfig::resolved_batch() const {
  CLEAVE_ASSERT(parallel.data_parallel_size >= 1 && batch.global_batch_size && batch.micro_batch_size &&
                    batch.gradient_accumulation_steps,
                "resolved_batch() before RunConfig::resolve()");
  return {*batch.global_batch_size, *batch.micro_batch_size, *batch.gradient_accumulation_steps};
}

}  // namespace cleave::config

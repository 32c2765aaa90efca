// See plan_search.hpp.
#include "engine/planner/plan_search.hpp"

#include <algorithm>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "engine/config/config.hpp"
#include "engine/core/error.hpp"
#include "engine/run_plan/memory_plan.hpp"
#include "engine/run_plan/plan.hpp"
#include "partition/block_work.hpp"
#include "partition/cost_model.hpp"
#include "partition/cp_rules.hpp"
#include "partition/ep_costs.hpp"
#include "partition/ep_rules.hpp"
#include "partition/tp_rules.hpp"
#include "pipeline/schedules/schedules.hpp"
#include "pipeline/simulator.hpp"

namespace cleave::planner {
namespace {

std::vector<int> divisors(std::int64_t n) {
  std::vector<int> out;
  for (std::int64_t d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(static_cast<int>(d));
  }
  return out;
}

// Per-stage costs in seconds, split so the breakdown can be reported.
struct StageParts {
  double f = 0, i = 0, w = 0;        // compute
  double f_tp = 0, i_tp = 0;         // tp all-reduces (or SP's reduce-scatter + all-gather) inside F and I
  double f_gather = 0, i_gather = 0; // ZeRO-3: the parameter all-gathers F and I wait for (not hidden by prefetch)
  double reduce = 0;                 // REDUCE_GRAD
  double step_gather = 0;            // ZeRO-1/2: the updated parameters' all-gather after the optimizer step
  double w_exposed = 0;              // ZeRO-2/3 per micro-batch: per W, the earlier reductions W cannot hide
  double comm_bytes = 0;             // bytes a rank of this stage sends per step (tp, dp, ZeRO-3, P2P)
};

// Bytes each rank sends in a ring collective of `bytes` per rank over n ranks: (n - 1) / n of it for a
// reduce-scatter or all-gather, twice that for an all-reduce.
double ring_bytes(double bytes, int n, bool all_reduce) {
  return n <= 1 ? 0.0 : (all_reduce ? 2.0 : 1.0) * (n - 1) / n * bytes;
}

// The global batch a plan keeps: the config's batch.global_batch_size, or what its own layout resolves to.
std::int64_t fixed_global_batch(const config::RunConfig& base, int world) {
  if (base.batch.global_batch_size) return *base.batch.global_batch_size;
  config::RunConfig copy = base;
  try {
    copy.resolve(world);
  } catch (const Error& e) {
    CLEAVE_THROW("plan: the planner keeps the global batch fixed; set batch.global_batch_size (the config's own "
                 "layout does not resolve on {} ranks: {})", world, e.what());
  }
  return copy.resolved_batch().global_batch_size;
}

}  // namespace

void check_profile_matches(const HardwareProfile& profile, const partition::ModelSpec& spec, bool bf16) {
  const partition::MeasuredCosts& m = profile.measured;
  if (!m.has_blocks()) return;
  const DType trains_in = bf16 ? DType::kBF16 : DType::kF32;
  CLEAVE_CHECK(m.dtype == trains_in,
               "profile '{}' timed its blocks in {} but the config trains in {} (device.precision \"{}\"): profile again "
               "with this config", profile.name, dtype_name(m.dtype), dtype_name(trains_in), bf16 ? "bf16" : "fp32");
  std::string missing;
  for (const auto& block : spec.blocks) {
    const std::string key = partition::block_shape_key(block);
    const bool any = std::any_of(m.blocks.begin(), m.blocks.end(), [&](const partition::MeasuredBlock& b) { return b.shape == key; });
    if (!any && missing.find(key) == std::string::npos) missing += (missing.empty() ? "" : ", ") + key;
  }
  CLEAVE_CHECK(missing.empty(),
               "profile '{}' was measured for another model: it has no measurement of {} (it holds {}); run `cleave "
               "profile CONFIG` for this config", profile.name, missing,
               m.blocks.empty() ? std::string("nothing") : m.blocks.front().shape + ", ...");
}

std::string oversubscription_warning(const PlanEstimate& e) {
  if (!e.oversubscribed()) return "";
  return fmt::format("{} puts {} ranks on a node of {} cores ({:.1f} ranks per core): each rank computes on {:.2f} of "
                     "a core, priced {:.2f}x the profile's compute; ranks that wait for a core also wait for each "
                     "other, so measured steps can be slower still (cleave plan --trial K measures them)",
                     e.choice.layout(), e.ranks_on_node, e.cores_per_node,
                     static_cast<double>(e.ranks_on_node) / e.cores_per_node,
                     static_cast<double>(e.cores_per_node) / e.ranks_on_node, e.core_sharing);
}

std::string PlanChoice::dense_layout() const {
  if (cp > 1) {
    return fmt::format("tp{} cp{}{} pp{} dp{}", tp, cp, cp_comm == config::ContextParallelComm::kAllToAll ? "a2a" : "",
                       pp, dp);
  }
  return fmt::format("tp{} pp{} dp{}", tp, pp, dp);
}

std::string PlanChoice::layout() const {
  const std::string ep_part = ep > 1 ? fmt::format(" ep{}", ep) : "";
  return dense_layout() + ep_part;
}

std::string PlanChoice::zero_label() const {
  const char* reduce = zero_stage < 2                                   ? ""
                       : zero_reduce == config::ZeroReduce::kPerMicrobatch ? "m"
                       : zero_reduce == config::ZeroReduce::kPerStep       ? "s"
                                                                           : "";
  return fmt::format("{}{}", zero_stage, reduce);
}

std::vector<std::string> PlanChoice::overrides() const {
  std::vector<std::string> keys = {fmt::format("parallel.tensor_model_parallel_size={}", tp),
          fmt::format("parallel.pipeline_model_parallel_size={}", pp),
          fmt::format("parallel.data_parallel_size={}", dp),
          fmt::format("parallel.virtual_pipeline_stages={}", virtual_stages),
          fmt::format("parallel.schedule={}", schedule),
          fmt::format("batch.micro_batch_size={}", micro_batch),
          fmt::format("batch.global_batch_size={}", global_batch),
          fmt::format("batch.gradient_accumulation_steps={}", global_batch / (micro_batch * dp)),
          fmt::format("optimizer.zero_stage={}", zero_stage),
          fmt::format("parallel.sequence_parallel={}", sequence_parallel),
          fmt::format("train.recompute={}", recompute)};
  if (zero_stage >= 2 && zero_reduce != config::ZeroReduce::kAuto) {
    keys.push_back(fmt::format("optimizer.zero_reduce={}", zero_reduce));
  }
  if (cp > 1) {
    keys.push_back(fmt::format("parallel.context_parallel_size={}", cp));
    keys.push_back(fmt::format("parallel.context_parallel_comm={}", cp_comm));
  }
  if (ep > 1) keys.push_back(fmt::format("parallel.expert_model_parallel_size={}", ep));
  return keys;
}

config::RunConfig PlanChoice::apply_to(const config::RunConfig& base) const {
  config::RunConfig c = base;
  auto& p = c.parallel;
  p.tensor_model_parallel_size = tp;
  p.pipeline_model_parallel_size = pp;
  p.data_parallel_size = dp;
  p.virtual_pipeline_stages = virtual_stages;
  p.schedule = schedule;
  c.batch.micro_batch_size = micro_batch;
  c.batch.global_batch_size = global_batch;
  c.batch.gradient_accumulation_steps = global_batch / (micro_batch * dp);
  c.optimizer.zero_stage = zero_stage;
  if (zero_stage >= 2 && zero_reduce != config::ZeroReduce::kAuto) c.optimizer.zero_reduce = zero_reduce;
  p.sequence_parallel = sequence_parallel;
  p.context_parallel_size = cp;
  p.context_parallel_comm = cp_comm;
  p.expert_model_parallel_size = ep;
  c.train.recompute = recompute;
  config::validate(c);
  return c;
}

PlanChoice choice_of_config(const std::string& config_path, const std::vector<std::string>& overrides, int world) {
  config::RunConfig config =
      config::load_config(config_path, overrides);
  config.resolve(world);
  const auto batch = config.resolved_batch();
  PlanChoice c;
  c.tp = config.parallel.tensor_model_parallel_size;
  c.pp = config.parallel.pipeline_model_parallel_size;
  c.dp = config.parallel.data_parallel_size;
  c.virtual_stages = run_plan::effective_virtual_stages(config);
  c.schedule = config.parallel.schedule;
  c.micro_batch = batch.micro_batch_size;
  c.zero_stage = config.optimizer.zero_stage;
  c.recompute = config.train.recompute;
  c.global_batch = batch.global_batch_size;
  c.sequence_parallel = config.parallel.sequence_parallel;
  c.zero_reduce = config::resolved_zero_reduce(config);
  c.cp = config.parallel.context_parallel_size;
  c.cp_comm = config.parallel.context_parallel_comm;
  c.ep = config.parallel.expert_model_parallel_size;
  return c;
}

PlanEstimate estimate_plan(const std::string& config_path, const std::vector<std::string>& overrides,
                           const PlanChoice& choice, const HardwareProfile& profile, const SearchOptions& options,
                           PlanDetails* details) {
  config::RunConfig base;
  try {
    base = config::load_config(config_path, overrides);
  } catch (const Error& e) {
    PlanEstimate est;
    est.choice = choice;
    est.reason = e.what();
    return est;
  }
  return estimate_plan(base, config_path.empty() ? "<defaults>" : config_path, overrides, choice, profile, options,
                       details);
}

namespace {

// What context parallelism adds to one attention layer per micro-batch on one cp rank.
struct ContextExchange {
  double forward_s = 0, backward_s = 0;  // exposed (not hidden behind compute)
  double bytes = 0;                      // sent by this rank
};

// The exchange of keys and values (docs/planner.md, "Context parallelism"), with unit = one [micro, T/cp, D/tp]
// activation:
//  - all_to_all: q, k, v there and the output back in the forward, dout there and dq, dk, dv back in the
//    backward (4 all-to-alls each way); (cp-1)/cp of each leaves the rank, priced as a reduce-scatter of the same
//    bytes from the profile's fits; nothing overlaps (attention waits for its heads).
//  - ring: cp-1 hops of K and V (2 units) in the forward, each in flight while the layer's blocks of the step
//    before compute, so only what the compute cannot hide is exposed; the backward's K/V hops overlap its
//    compute the same way, the cp hops of dK, dV do not (each waits for the blocks that add to it).
template <typename CollectiveCost>
ContextExchange context_exchange(const partition::ModelSpec& spec, const PlanChoice& c, double micro, double act_bytes,
                                 double layer_f, double layer_b, double core_sharing, const Link& link,
                                 const CollectiveCost& collective_s) {
  const auto sizes = spec.token_sizes();
  const double unit = micro * static_cast<double>(sizes.seq_len / c.cp) *
                      static_cast<double>(sizes.d_model / c.tp) * act_bytes;
  ContextExchange x;
  if (c.cp_comm == config::ContextParallelComm::kAllToAll) {
    x.forward_s = 4 * collective_s(partition::Collective::kReduceScatter, unit, c.cp, link);
    x.backward_s = x.forward_s;
    x.bytes = 8 * unit * (c.cp - 1) / c.cp;
    return x;
  }
  const double hop = link.latency_s + 2 * unit / link.bandwidth_Bps;
  const double hops = c.cp - 1;
  x.forward_s = std::max(0.0, hops * hop - core_sharing * layer_f);
  x.backward_s = std::max(0.0, hops * hop - core_sharing * layer_b) + c.cp * hop;
  x.bytes = (2 * hops + c.cp) * 2 * unit;
  return x;
}

// What expert parallelism adds to one moe block per micro-batch on the busiest ep rank (docs/planner.md, "Expert
// parallelism"): the four all-to-alls, each of imbalance × micro × T/cp × k rows of D values priced as a
// reduce-scatter of those bytes over the ep ranks (the profile's fits; no overlap with compute), and the extra
// time of its expert GEMMs, which run imbalance × the mean rows: their FLOP share of the block's pass times
// (imbalance - 1), per pass.
struct ExpertExchange {
  double forward_s = 0, backward_s = 0;  // all-to-all time in F (dispatch, combine) and in I (their gradients)
  double bytes = 0;                      // sent by a rank (mean), per micro-batch
  double f_share = 0, i_share = 0, w_share = 0;  // (imbalance - 1) × the expert GEMMs' share of F, I, W
};

template <typename CollectiveCost>
ExpertExchange expert_exchange(const partition::BlockSpec& block, const partition::BlockCost& cost, const PlanChoice& c,
                               double micro, DType dtype, double imbalance, const Link& link,
                               const CollectiveCost& collective_s) {
  ExpertExchange x;
  const partition::EpExchangeBytes b = partition::ep_exchange_bytes(block, dtype, micro, c.cp, c.ep, imbalance);
  x.forward_s = 2 * collective_s(partition::Collective::kReduceScatter, b.busiest, c.ep, link);
  x.backward_s = x.forward_s;
  x.bytes = 4 * b.sent_mean;
  // Expert GEMMs per sample: gate, up (D -> F/tp) and down (F/tp -> D) over T·k rows, 2 FLOPs a multiply-add, the
  // same count in each pass (input gradient: dx of each; weight gradient: dW of each).
  const double expert_flops = 3.0 * 2.0 * static_cast<double>(block.seq_len * block.top_k * block.in_features) *
                              static_cast<double>(block.d_ff);
  const auto share = [&](double pass_flops) {
    return pass_flops > 0 ? (imbalance - 1.0) * std::min(1.0, expert_flops / pass_flops) : 0.0;
  };
  x.f_share = share(cost.forward_flops);
  x.i_share = share(cost.input_grad_flops);
  x.w_share = share(cost.weight_grad_flops);
  return x;
}

}  // namespace

PlanEstimate estimate_plan(const config::RunConfig& base, std::string_view origin,
                           const std::vector<std::string>& overrides, const PlanChoice& choice,
                           const HardwareProfile& profile, const SearchOptions& options, PlanDetails* details) {
  PlanEstimate est;
  est.choice = choice;
  config::RunConfig config;
  run_plan::Plan plan;
  try {
    config = choice.apply_to(base);
  } catch (const ConfigKeyError& e) {
    // Worded as when the candidate was read as --set overrides: the key's origin, then the key.
    std::vector<std::string> all = overrides;
    for (auto& o : choice.overrides()) all.push_back(o);
    est.reason = config::keyed_message(e, origin, all);
    return est;
  }
  try {
    config.resolve(options.world);
    // The search applies its own cap (options.memory_limit, which a cap in the config already became) below:
    // a plan over it is valid but does not fit. Left in the config, make_plan would refuse it as invalid.
    config.device.memory_limit = 0;
    plan = run_plan::make_plan(config, static_cast<int>(config.resolved_batch().gradient_accumulation_steps), 0);
  } catch (const Error& e) {
    est.reason = e.what();
    return est;
  }
  est.valid = true;

  // Memory: the trainer's own estimate for every pp rank. What a rank touches over and over in a step (all of it
  // but the optimizer state, which only the optimizer step reads) decides how warm its caches stay.
  std::vector<std::int64_t> working_set(static_cast<std::size_t>(choice.pp), 0);
  for (int r = 0; r < choice.pp; ++r) {
    const run_plan::MemoryPlan memory = run_plan::estimate_rank_memory(plan, config, r, options.ep_imbalance);
    working_set[static_cast<std::size_t>(r)] =
        memory.total() - memory.bytes[static_cast<std::size_t>(MemoryCategory::kOptimizerState)];
    if (details) details->memory_plan.push_back(memory.bytes);
    if (memory.total() > est.peak_bytes) {
      est.peak_bytes = memory.total();
      est.peak_rank = r;
      est.peak_by_category = memory.bytes;
    }
  }
  const std::int64_t cap = options.memory_limit;
  est.fits = cap == 0 || est.peak_bytes <= cap;
  if (!est.fits) {
    est.reason = fmt::format("pp rank {} needs {} > cap {}", est.peak_rank, format_bytes(est.peak_bytes), format_bytes(cap));
  }

  // Time: per-stage costs from the profile's measured tables (cleave profile), else a roofline over the
  // block's kernels (a shipped profile with peak_tflops and gemm_efficiency), else the cost model's FLOPs over
  // the profile's rates; timed by the simulator.
  const bool bf16 = config.device.precision == config::Precision::kBf16;
  const DType dtype = bf16 ? DType::kBF16 : DType::kF32;
  const partition::Recompute recompute = choice.recompute;
  const auto costs = partition::model_costs(plan.spec, dtype, recompute);
  const partition::MeasuredCosts& measured = profile.measured;
  const bool use_table = measured.has_blocks();
  if (use_table) {
    check_profile_matches(profile, plan.spec, bf16);
    for (const auto& block : plan.spec.blocks) {
      if (!measured.covers(partition::block_shape_key(block), choice.tp)) {
        est.valid = est.fits = false;
        est.reason = fmt::format("profile '{}' has no measurement at tensor-parallel width {} (run cleave profile with "
                                 "--world {})", profile.name, choice.tp, options.world);
        return est;
      }
    }
  }
  const auto plain_costs = partition::model_costs(plan.spec, dtype, partition::Recompute::kNone);
  const bool one_node = options.world <= profile.ranks_per_node;
  // Ranks sharing a node's cores: each computes on its share (HardwareProfile::core_sharing), so a layout with
  // more ranks than cores is never priced faster than the cores allow.
  est.ranks_on_node = std::min(options.world, std::max(1, profile.ranks_per_node));
  est.cores_per_node = profile.cores_per_node;
  est.core_sharing = profile.core_sharing(est.ranks_on_node);
  // A collective over `ranks` ranks of `bytes` per rank: the profile's measured fit where it has one for that
  // group size (inside a node), else the ring formula over the link.
  using partition::Collective;
  const auto collective_s = [&](Collective op, double bytes, int ranks, const Link& link) {
    if (ranks <= 1 || bytes <= 0) return 0.0;
    if (const partition::AlphaBeta* fit = measured.collective(op, ranks); fit != nullptr && &link == &profile.intra_node) {
      return fit->seconds(bytes);
    }
    return op == Collective::kAllReduce ? link.all_reduce_s(bytes, ranks) : link.all_reduce_s(bytes, ranks) / 2;
  };
  const double micro = static_cast<double>(choice.micro_batch);
  const double micro_batches = static_cast<double>(config.resolved_batch().gradient_accumulation_steps);
  const int replicas = choice.dp * choice.cp;  // ranks holding the same parameters
  const int zero = replicas > 1 ? config.optimizer.zero_stage : 0;
  const bool per_microbatch = zero >= 2 && config::resolved_zero_reduce(config) == config::ZeroReduce::kPerMicrobatch;
  const double flops = profile.flops(bf16);
  const Link& p2p_link = options.world > profile.ranks_per_node ? profile.inter_node : profile.intra_node;
  // Gradients are reduced over dp × cp ranks (ZeRO shards over them too): the replicas the tail sees.
  const Link& dp_link =
      choice.tp * choice.cp * choice.dp > profile.ranks_per_node ? profile.inter_node : profile.intra_node;
  const Link& cp_link = choice.tp * choice.cp > profile.ranks_per_node ? profile.inter_node : profile.intra_node;
  // ep is the fastest coordinate inside dp × cp: an ep group spans tp × ep consecutive ranks.
  const Link& ep_link = choice.tp * choice.ep > profile.ranks_per_node ? profile.inter_node : profile.intra_node;
  est.ep_imbalance = choice.ep == 1        ? 1.0
                     : options.ep_imbalance > 0 ? options.ep_imbalance
                                                : partition::workload_ep_imbalance(plan.spec, choice.micro_batch, choice.cp, choice.ep);
  const double act_bytes = static_cast<double>(dtype_size(dtype));
  const int num_stages = plan.num_stages();
  std::vector<StageParts> parts(static_cast<std::size_t>(num_stages));
  // A fused backward (B) runs each block's I then W before the next block's, so W hides a prefetch too.
  bool fused_backward = false;
  for (const auto& rank : plan.schedule.ranks) {
    for (const auto& a : rank) fused_backward = fused_backward || a.kind == pipeline::ActionKind::kBackward;
  }
  pipeline::SimulationCosts sim = pipeline::SimulationCosts::uniform(num_stages, 0, 0, 0);
  double local_params = 0;  // elements on the busiest pp rank, for the optimizer step
  std::vector<double> rank_params(static_cast<std::size_t>(choice.pp), 0.0);
  for (int s = 0; s < num_stages; ++s) {
    const auto range = plan.partition.stages[static_cast<std::size_t>(s)];
    StageParts& p = parts[static_cast<std::size_t>(s)];
    const double warm = measured.warm_fraction(working_set[static_cast<std::size_t>(plan.stage_to_rank(s))]);
    double grad_bytes = 0;
    // ZeRO-3, per block of the stage: its compute in F and in the backward (I; a fused B's W too) and the
    // all-gather of its parameters.
    std::vector<double> block_f, block_b, block_gather;
    for (int b = range.begin; b < range.end; ++b) {
      const auto& c = costs[static_cast<std::size_t>(b)];
      const auto& block = plan.spec.blocks[static_cast<std::size_t>(b)];
      const double f_before = p.f, i_before = p.i, w_before = p.w;
      if (use_table) {
        const partition::BlockTimes t = measured.block_times(block, choice.tp, choice.micro_batch, profile.name, warm);
        // Recomputation reruns part of the forward inside I: its share of the measured forward time.
        const auto& plain = plain_costs[static_cast<std::size_t>(b)];
        const double rerun = plain.forward_flops > 0 ? (c.input_grad_flops - plain.input_grad_flops) / plain.forward_flops : 0.0;
        p.f += t.forward_s;
        p.i += t.input_grad_s + std::max(0.0, rerun) * t.forward_s;
        p.w += t.weight_grad_s;
      } else if (profile.has_roofline()) {  // a shipped profile: kernel by kernel
        const partition::BlockWork work = partition::block_work(block, dtype, recompute, choice.tp, choice.micro_batch);
        p.f += profile.roofline_seconds(work.forward, bf16);
        p.i += profile.roofline_seconds(work.input_grad, bf16);
        p.w += profile.roofline_seconds(work.weight_grad, bf16);
      } else {
        const bool rates = !bf16 && profile.block_forward_flops > 0;
        p.f += c.forward_flops * micro / choice.tp / (rates ? profile.block_forward_flops : flops);
        p.i += c.input_grad_flops * micro / choice.tp / (rates ? profile.block_input_grad_flops : flops);
        p.w += c.weight_grad_flops * micro / choice.tp / (rates ? profile.block_weight_grad_flops : flops);
      }
      if (choice.cp > 1) {  // each cp rank computes its T / cp tokens (ring's chunk pairs balance the causal work)
        p.f = f_before + (p.f - f_before) / choice.cp;
        p.i = i_before + (p.i - i_before) / choice.cp;
        p.w = w_before + (p.w - w_before) / choice.cp;
      }
      grad_bytes += 4.0 * static_cast<double>(c.param_count) / choice.tp;
      block_f.push_back(p.f - f_before);
      block_b.push_back(p.i - i_before + (fused_backward ? p.w - w_before : 0.0));
      // ZeRO-3 gathers the block's parameters (one tp rank's, in the compute dtype) from the dp group.
      const double block_params = act_bytes * static_cast<double>(c.param_count) / choice.tp;
      block_gather.push_back(zero == 3 ? collective_s(Collective::kAllGather, block_params, replicas, dp_link) : 0.0);
      if (zero == 3) p.comm_bytes += 2 * micro_batches * ring_bytes(block_params, replicas, false);
      if (choice.tp > 1 && partition::is_language_model(plan.spec.type)) {
        const auto sizes = plan.spec.token_sizes();
        const double activation =
            micro * static_cast<double>(sizes.seq_len / choice.cp * sizes.d_model) * act_bytes;
        // One tp all-reduce of [micro, T, D]; under sequence parallelism a reduce-scatter and an all-gather of the
        // same tensor take its place (the same bytes on the wire).
        const double exchange = choice.sequence_parallel
                                    ? collective_s(Collective::kReduceScatter, activation, choice.tp, profile.intra_node) +
                                          collective_s(Collective::kAllGather, activation, choice.tp, profile.intra_node)
                                    : collective_s(Collective::kAllReduce, activation, choice.tp, profile.intra_node);
        double exchanges = 0;
        if (partition::is_repeated_layer(block.kind)) {
          p.f_tp += 2 * exchange;
          // Full recomputation reruns the forward, its two exchanges included, inside I.
          const double rerun = recompute == partition::Recompute::kFull ? 2 : 0;
          p.i_tp += (2 + rerun) * exchange;
          exchanges = 4 + rerun;
        } else if (block.kind == partition::BlockKind::kEmbedding) {
          p.f_tp += exchange;
          exchanges = 1;
        }
        p.comm_bytes += micro_batches * exchanges * ring_bytes(activation, choice.tp, true);
      }
      if (choice.cp > 1 && partition::is_repeated_layer(block.kind)) {
        const ContextExchange x = context_exchange(plan.spec, choice, micro, act_bytes, p.f - f_before,
                                                   p.i - i_before, est.core_sharing, cp_link, collective_s);
        p.f_tp += x.forward_s;
        p.i_tp += x.backward_s + (recompute == partition::Recompute::kFull ? x.forward_s : 0.0);
        p.comm_bytes += micro_batches * x.bytes;
      }
      if (choice.ep > 1 && block.n_experts > 0) {
        const ExpertExchange x =
            expert_exchange(block, c, choice, micro, dtype, est.ep_imbalance, ep_link, collective_s);
        p.f += x.f_share * (p.f - f_before);
        p.i += x.i_share * (p.i - i_before);
        p.w += x.w_share * (p.w - w_before);
        est.ep_all_to_all_s = x.forward_s + x.backward_s;
        p.f_tp += x.forward_s;
        p.i_tp += x.backward_s + (recompute == partition::Recompute::kFull ? x.forward_s : 0.0);
        p.comm_bytes += micro_batches * x.bytes;
        // The rank holds (and reduces, and updates) E / ep of the block's experts.
        grad_bytes -= 4.0 * static_cast<double>(partition::expert_param_count(block)) / choice.tp * (choice.ep - 1) / choice.ep;
      }
    }
    if (zero == 3 && replicas > 1) {
      // Prefetched: a block's gather runs while the block before it computes (forward: first to last; backward:
      // last to first, under the block's I, or its I and W in a fused B); a stage's first gather waits in full.
      const std::size_t n = block_gather.size();
      p.f_gather = block_gather.front();
      p.i_gather = block_gather.back();
      for (std::size_t k = 1; k < n; ++k) {
        p.f_gather += std::max(0.0, block_gather[k] - est.core_sharing * block_f[k - 1]);
        p.i_gather += std::max(0.0, block_gather[n - 1 - k] - est.core_sharing * block_b[n - k]);
      }
    }
    const double wire = config.parallel.grad_reduce_dtype == config::GradReduceDtype::kBf16 ? grad_bytes / 2 : grad_bytes;
    // ZeRO 0 all-reduces the gradients; 1, 2 and 3 reduce-scatter them (half an all-reduce's bytes: each replica
    // keeps its shard); 1 and 2 then all-gather the updated parameters after the optimizer step (3 keeps them
    // sharded and gathers per block, above).
    p.reduce = zero == 0 ? collective_s(Collective::kAllReduce, wire, replicas, dp_link)
                         : collective_s(Collective::kReduceScatter, wire, replicas, dp_link);
    p.step_gather = zero == 1 || zero == 2 ? collective_s(Collective::kAllGather, grad_bytes, replicas, dp_link) : 0.0;
    p.comm_bytes += ring_bytes(wire, replicas, zero == 0) + (zero == 1 || zero == 2 ? ring_bytes(grad_bytes, replicas, false) : 0.0);
    if (per_microbatch) {
      // optimizer.zero_reduce per_microbatch: every micro-batch reduce-scatters the stage's gradients. The last
      // one is REDUCE_GRAD's (above); each earlier one runs behind the next weight-gradient pass, and what the
      // pass cannot hide lengthens it (spread over the stage's W actions).
      const double hidden_by = est.core_sharing * p.w;
      p.w_exposed = micro_batches > 1 ? std::max(0.0, p.reduce - hidden_by) * (micro_batches - 1) / micro_batches : 0.0;
      p.comm_bytes += (micro_batches - 1) * ring_bytes(wire, replicas, false);
    }
    p.f *= est.core_sharing, p.i *= est.core_sharing, p.w *= est.core_sharing;
    rank_params[static_cast<std::size_t>(plan.stage_to_rank(s))] += grad_bytes / 4.0;
    auto& sc = sim.stages[static_cast<std::size_t>(s)];
    sc.backward_weight = p.w + p.w_exposed;
    sc.reduce_grad = p.reduce;
    sc.output_bytes = static_cast<double>(costs[static_cast<std::size_t>(range.end - 1)].output_bytes) * micro;
    if (s + 1 < num_stages) p.comm_bytes += 2 * micro_batches * sc.output_bytes;  // activation out, gradient back
    const bool sent = s + 1 < num_stages && plan.stage_to_rank(s + 1) != plan.stage_to_rank(s);  // V's turn stays
    if (options.scatter_gather_boundaries && choice.tp > 1 && sent) {
      // Megatron's scatter/gather: each tp rank sends 1/tp of the boundary tensor, and the receiving stage's tp
      // group all-gathers it inside the node (before F from the stage before, before I from the stage after).
      const double whole = sc.output_bytes;
      sc.output_bytes = whole / choice.tp;
      parts[static_cast<std::size_t>(s + 1)].f_tp += collective_s(Collective::kAllGather, whole, choice.tp, profile.intra_node);
      p.i_tp += collective_s(Collective::kAllGather, whole, choice.tp, profile.intra_node);
    }
  }
  for (int s = 0; s < num_stages; ++s) {  // every part known (a boundary's gather lands on the next stage)
    const StageParts& p = parts[static_cast<std::size_t>(s)];
    auto& sc = sim.stages[static_cast<std::size_t>(s)];
    sc.forward = p.f + p.f_tp + p.f_gather;
    sc.backward_input = p.i + p.i_tp + p.i_gather;
  }
  local_params = *std::max_element(rank_params.begin(), rank_params.end());
  // The update streams the value and gradient in and the value out, and each state tensor in and out (f32).
  const double optimizer_bytes_per_param = 4.0 * (3 + 2 * config.optimizer.state_tensors_per_param());
  const int shards = zero >= 1 ? replicas : 1;  // ZeRO: each replica updates its shard
  sim.optimizer_step = local_params * optimizer_bytes_per_param / shards / profile.memory_bandwidth_Bps;
  if (measured.adamw_s_per_param > 0) {  // timed by `cleave profile`
    const double per_param = config.optimizer.type == config::OptimizerType::kAdamw ? measured.adamw_s_per_param
                             : config.optimizer.momentum != 0.0 ? measured.sgd_momentum_s_per_param
                                                                : measured.sgd_s_per_param;
    sim.optimizer_step = local_params * per_param / shards;
  }
  sim.optimizer_step *= est.core_sharing;
  // ZeRO-1/2's all-gather of the updated parameters follows the update on every rank: the busiest rank's.
  std::vector<double> rank_gather(static_cast<std::size_t>(choice.pp), 0.0);
  for (int s = 0; s < num_stages; ++s) rank_gather[static_cast<std::size_t>(plan.stage_to_rank(s))] += parts[static_cast<std::size_t>(s)].step_gather;
  const double step_gather = *std::max_element(rank_gather.begin(), rank_gather.end());
  sim.optimizer_step += step_gather;
  for (const StageParts& p : parts) est.comm_bytes += p.comm_bytes / choice.pp;
  sim.p2p_latency = choice.pp > 1 ? p2p_link.latency_s : 0.0;
  sim.p2p_bandwidth = p2p_link.bandwidth_Bps;
  if (measured.p2p && one_node && choice.pp > 1) {
    sim.p2p_latency = measured.p2p->latency_s;
    sim.p2p_bandwidth = measured.p2p->bandwidth_Bps;
  }
  const pipeline::SimulationResult result = pipeline::simulate(plan.schedule, sim);
  est.step_s = result.stats.makespan;
  est.bubble = result.stats.bubble_fraction;
  const double items = static_cast<double>(config.resolved_batch().global_batch_size * plan.spec.items_per_sample());
  est.items_per_s = est.step_s > 0 ? items / est.step_s : 0.0;

  // Breakdown on the busiest pp rank.
  int busiest = 0;
  for (std::size_t r = 0; r < result.stats.ranks.size(); ++r) {
    if (result.stats.ranks[r].busy > result.stats.ranks[static_cast<std::size_t>(busiest)].busy) busiest = static_cast<int>(r);
  }
  StepBreakdown& bd = est.breakdown;
  for (const auto& a : plan.schedule.ranks[static_cast<std::size_t>(busiest)]) {
    const StageParts& p = parts[static_cast<std::size_t>(std::max(0, a.stage))];
    switch (a.kind) {
      case pipeline::ActionKind::kForward: bd.compute_s += p.f, bd.tp_comm_s += p.f_tp, bd.dp_comm_s += p.f_gather; break;
      case pipeline::ActionKind::kBackwardInput: bd.compute_s += p.i, bd.tp_comm_s += p.i_tp, bd.dp_comm_s += p.i_gather; break;
      case pipeline::ActionKind::kBackwardWeight: bd.compute_s += p.w, bd.dp_comm_s += p.w_exposed; break;
      case pipeline::ActionKind::kBackward:
        bd.compute_s += p.i + p.w, bd.tp_comm_s += p.i_tp, bd.dp_comm_s += p.i_gather + p.w_exposed;
        break;
      case pipeline::ActionKind::kReduceGrad: bd.dp_comm_s += p.reduce; break;
      case pipeline::ActionKind::kOptimizerStep:
        bd.optimizer_s += sim.optimizer_step - step_gather, bd.dp_comm_s += step_gather;
        break;
      default: break;
    }
  }
  bd.idle_s = std::max(0.0, est.step_s - bd.compute_s - bd.tp_comm_s - bd.dp_comm_s - bd.optimizer_s);
  if (details) {
    // Memory over the step per pp rank: static categories plus the activations the timeline holds.
    const double per_micro = micro / (bf16 ? 2.0 : 1.0);
    // One tp rank's activations (the cost model's tp layout), as the memory plan counts them.
    const auto shard = partition::model_costs(plan.spec, DType::kF32, choice.recompute, choice.tp);
    std::vector<run_plan::StageBackwardMemory> stage_memory;
    for (int s = 0; s < num_stages; ++s) {
      const auto range = plan.partition.stages[static_cast<std::size_t>(s)];
      stage_memory.push_back(run_plan::stage_backward_memory(
          std::vector<partition::BlockCost>(shard.begin() + range.begin, shard.begin() + range.end)));
    }
    for (std::size_t r = 0; r < result.timeline.ranks.size(); ++r) {
      const auto& plan_bytes = details->memory_plan[r];
      std::int64_t fixed = 0;
      for (int c = 0; c < kNumMemoryCategories; ++c) {
        if (c != static_cast<int>(MemoryCategory::kActivations) && c != static_cast<int>(MemoryCategory::kWorkspace)) {
          fixed += plan_bytes[static_cast<std::size_t>(c)];
        }
      }
      std::vector<std::pair<double, double>> events;  // (time, delta bytes)
      for (const auto& a : result.timeline.ranks[r]) {
        if (a.action.stage < 0) continue;
        const run_plan::StageBackwardMemory& sm = stage_memory[static_cast<std::size_t>(a.action.stage)];
        const double act = static_cast<double>(sm.forward_stash) * per_micro;
        const double held_for_w = static_cast<double>(sm.weight_stash) * per_micro;
        switch (a.action.kind) {
          case pipeline::ActionKind::kForward: events.push_back({a.start, act}); break;
          case pipeline::ActionKind::kBackwardInput: {  // each block's backward holds its extra while it runs
            const double extra = static_cast<double>(sm.input_peak) * per_micro;
            events.push_back({a.start, extra});
            events.push_back({a.end, held_for_w - act - extra});
            break;
          }
          case pipeline::ActionKind::kBackwardWeight: events.push_back({a.end, -held_for_w}); break;
          case pipeline::ActionKind::kBackward: {
            const double extra = static_cast<double>(sm.fused_peak) * per_micro;
            events.push_back({a.start, extra});
            events.push_back({a.end, -act - extra});
            break;
          }
          default: break;
        }
      }
      std::stable_sort(events.begin(), events.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
      std::vector<MemoryPoint> line = {{0.0, fixed}};
      double live = 0;
      std::int64_t peak = fixed;
      for (const auto& [time, delta] : events) {
        live += delta;
        const std::int64_t bytes = fixed + static_cast<std::int64_t>(std::max(0.0, live));
        line.push_back({time, bytes});
        peak = std::max(peak, bytes);
      }
      line.push_back({est.step_s, fixed});
      details->memory_timeline.push_back(std::move(line));
      details->timeline_peak.push_back(peak);
    }
    details->simulated = result;
  }
  return est;
}

PlanningSetup planning_setup(const config::RunConfig& base, const std::string& profile_path,
                             const std::string& limit_text, int world) {
  PlanningSetup s;
  s.profile = profile_path.empty() ? measure_this_machine(run_plan::model_spec(base.model), world) : load_profile(profile_path);
  // A CPU profile describes the machine it measured, and a plan runs there: every rank on that one node, sharing
  // its cores (its ranks_per_node, the ranks the profile was made for, would otherwise spread a larger world over
  // imaginary nodes of the same cores, and the sharing would go unpriced and unsaid).
  // Its device memory (the machine's memory over the ranks it was made for) is shared by the world the same way.
  if (s.profile.device_type == DeviceType::kCpu && s.profile.cores_per_node > 0 && world > s.profile.ranks_per_node) {
    s.profile.device_memory = s.profile.device_memory * s.profile.ranks_per_node / world;
    s.profile.ranks_per_node = world;
  }
  check_profile_matches(s.profile, run_plan::model_spec(base.model), base.device.precision == config::Precision::kBf16);
  s.options.world = world;
  s.options.memory_limit = !limit_text.empty()            ? parse_bytes(limit_text, "--memory-limit")
                           : base.device.memory_limit > 0 ? base.device.memory_limit
                                                          : s.profile.device_memory;
  return s;
}

SearchResult search_plans(const std::string& config_path, const std::vector<std::string>& overrides,
                          const HardwareProfile& profile, const SearchOptions& options) {
  CLEAVE_CHECK(options.world >= 1, "plan: --world must be >= 1, got {}", options.world);
  const config::RunConfig base = config::load_config(config_path, overrides);
  const std::string origin = config_path.empty() ? "<defaults>" : config_path;
  const std::int64_t global = fixed_global_batch(base, options.world);
  SearchResult out;
  out.memory_limit = options.memory_limit;
  out.unit = partition::is_language_model(base.model.type) ? "tok" : "samples";
  SearchOptions opts = options;
  opts.memory_limit = out.memory_limit;

  std::vector<int> tps = {1};
  if (const auto tp_sizes = partition::family(base.model.type).tp_sizes) {
    tps.clear();
    for (auto t : tp_sizes(base.model)) {
      if (options.world % t == 0 && t <= profile.ranks_per_node) tps.push_back(static_cast<int>(t));
    }
  }
  using partition::Recompute;
  const std::vector<Recompute> recomputes =
      partition::is_language_model(base.model.type)
          ? std::vector<Recompute>{Recompute::kNone, Recompute::kSelective, Recompute::kFull}
          : std::vector<Recompute>{Recompute::kNone};
  // Context parallelism (language models): each cp size the model allows for some exchange, with each exchange
  // that allows it (ring first: no head rule); the config checks refuse the rest as invalid candidates.
  const partition::ModelSpec spec = partition::make_model_spec(base.model.type, base.model);
  using CpComm = config::ContextParallelComm;
  int layouts = 0;
  for (int tp : tps) {
   std::vector<std::pair<int, CpComm>> cps = {{1, CpComm::kRing}};
   for (int cp : divisors(options.world / tp)) {
    if (cp == 1 || !partition::has_attention(spec)) continue;
    for (CpComm comm : {CpComm::kRing, CpComm::kAllToAll}) {
      const auto ok = partition::allowed_cp_sizes(spec, tp, comm == CpComm::kRing, false, cp);
      if (ok.back() == cp) cps.push_back({cp, comm});
    }
   }
   for (const auto& [cp, cp_comm] : cps) {
    for (int pp : divisors(options.world / (tp * cp))) {
      const int dp = options.world / (tp * cp * pp);
      if (global % dp != 0) {
        PlanEstimate refused;
        refused.choice = PlanChoice{tp, pp, dp, 1, "-", 1, 0, partition::Recompute::kNone, global, false};
        refused.choice.cp = cp;
        refused.choice.cp_comm = cp_comm;
        refused.reason = fmt::format("batch.global_batch_size {} is not divisible by dp {}", global, dp);
        out.rejected.push_back(std::move(refused));
        continue;
      }
      ++layouts;
      // Expert parallelism (moe models): every ep the experts and the dp × cp ranks allow (partition/ep_rules.hpp).
      std::vector<int> eps = {1};
      if (partition::routed_experts(spec) > 0) {
        for (const std::int64_t ep : partition::allowed_ep_sizes(spec, static_cast<std::int64_t>(dp) * cp)) {
          if (ep > 1) eps.push_back(static_cast<int>(ep));
        }
      }
      std::vector<std::pair<std::string, int>> schedules;
      if (pp == 1) {
        schedules.push_back({"1f1b", 1});
      } else {
        for (auto name : pipeline::schedule_names()) {
          const std::string n(name);
          schedules.push_back({n, pipeline::default_virtual_stages(n)});
          if (n == "interleaved_1f1b") schedules.push_back({n, 4});
        }
      }
      for (const auto& [schedule, v] : schedules) {
        for (int micro : divisors(global / dp)) {
          for (int zero : dp * cp > 1 ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{0}) {
            for (bool sp : tp > 1 ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
              // ZeRO-2/3: both reduction forms, where the per-micro-batch one applies (config::resolved_zero_reduce).
              std::vector<config::ZeroReduce> reduces = {config::ZeroReduce::kAuto};
              if (zero >= 2) {
                reduces = {config::ZeroReduce::kPerStep};
                if (!base.train.deterministic && !sp) reduces.insert(reduces.begin(), config::ZeroReduce::kPerMicrobatch);
              }
              for (const config::ZeroReduce reduce : reduces) {
                for (const Recompute recompute : recomputes) {
                  for (const int ep : eps) {
                    PlanChoice c{tp, pp, dp, v, schedule, micro, zero, recompute, global, sp, reduce, cp, cp_comm};
                    c.ep = ep;
                    PlanEstimate e = estimate_plan(base, origin, overrides, c, profile, opts);
                    (e.fits ? out.ranked : out.rejected).push_back(std::move(e));
                  }
                }
              }
            }
          }
        }
      }
    }
   }
  }
  CLEAVE_CHECK(layouts > 0, "plan: no layout of {} ranks fits this config: tp must divide n_heads and d_ff (and stay "
               "within a node of {} ranks), and dp must divide batch.global_batch_size {}", options.world,
               profile.ranks_per_node, global);
  std::stable_sort(out.ranked.begin(), out.ranked.end(), [](const PlanEstimate& a, const PlanEstimate& b) {
    if (a.step_s != b.step_s) return a.step_s < b.step_s;
    if (a.peak_bytes != b.peak_bytes) return a.peak_bytes < b.peak_bytes;
    return a.comm_bytes < b.comm_bytes;
  });
  return out;
}

}  // namespace cleave::planner

// `cleave simulate --config CONFIG --world N [--profile FILE] [--memory-limit SIZE] [--set k=v ...]
// [--json] [--svg FILE] [--trace FILE] [--explain]`: one training step of the plan a config describes (its own layout,
// schedule, micro-batch, ZeRO and recompute) on N ranks, timed with the planner's costs (cost model +
// hardware profile: engine/planner/plan_search.hpp) instead of uniform ones. Prints the predicted step
// time, throughput, bubble, where the busiest rank's time goes (--explain: term by term, planner::StepBreakdown),
// and per pp rank the memory plan by category
// and the peak of the memory timeline over the step (bytes). No MPI: it simulates.
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/cli/args.hpp"
#include "engine/cli/ep_memory_args.hpp"
#include "engine/cli/commands.hpp"
#include "engine/config/config.hpp"
#include "engine/core/allocator.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/core/output_path.hpp"
#include "engine/planner/hardware_profile.hpp"
#include "engine/planner/plan_search.hpp"
#include "engine/run_plan/memory_plan.hpp"
#include "engine/run_plan/plan.hpp"
#include "partition/cost_model.hpp"
#include "partition/ep_costs.hpp"
#include "partition/ep_rules.hpp"
#include "pipeline/trace.hpp"

namespace cleave::cli {

namespace {

// The kernels the simulated run launched (apply_kernel_options reads them).
void add_kernel_option_args(ArgParser& p) {
  p.text("--attention", "KIND",
            "the attention kernel the simulated run used (the engine runs memory_efficient, the default):\n"
            "probabilities stores the [T, T] scores and runs softmax over them (Megatron-LM's fused\n"
            "scale-mask-softmax), probabilities_dropout also attention dropout; roofline profiles only")
      .text("--attention-kernel", "NAME",
            "the attention kernel family the run launched (the profile's attention_rates: cudnn, flash3,\n"
            "flash2, triton, ...): its forward and backward priced at that kernel's published rate for the\n"
            "pass, mask, head dim and sequence length, in place of the attention_efficiency cap; with\n"
            "--attention probabilities[_dropout], an unfused kernel (pytorch: PyTorch's standard attention)\n"
            "prices the scores, softmax and products per pass at its rate without the mask (dropout apart);\n"
            "roofline profiles only")
      .text("--cross-entropy", "KIND",
            "the loss kernels the simulated run used (the engine runs fused, the default: one kernel per\n"
            "pass): float32 is Megatron-LM's unfused vocab-parallel cross-entropy over f32 logits (cast, max,\n"
            "subtract, exp, sum, normalise; its gradient and the cast back); torch_float32 is PyTorch's\n"
            "F.cross_entropy over logits cast to f32 (torchtitan: cast, log_softmax, nll_loss; their\n"
            "gradients); roofline profiles only")
      .flag("--hidden-dropout",
            "price the run's hidden dropout (Megatron-LM's --hidden-dropout): a byte mask on each gpt\n"
            "block's two residual branches and the embedding's output, and its gradient; roofline profiles\n"
            "only (the engine has no dropout)")
      .text("--selective-recompute", "KIND",
            "what train.recompute selective reruns in the simulated run: attention (the default, as the engine:\n"
            "the attention core's forward) or torchtitan_op (torchtitan's per-op policy: each transformer block\n"
            "saves the attention's and every other GEMM's output and reruns its 2nd, 4th, 6th GEMM (llama: wk,\n"
            "wo, w3) and all its elementwise ops); the compute term only, the memory plan keeps selective's;\n"
            "roofline profiles only")
      .text("--norm", "KIND",
            "the RMSNorm kernels the simulated run used (the engine runs fused, the default: one kernel per\n"
            "pass); torch_unfused is PyTorch's eager RMSNorm (torchtitan's norm_type rmsnorm: cast to f32, pow,\n"
            "mean, rsqrt, products, cast back, one kernel per op) for a llama block's two norms and the final\n"
            "norm; roofline profiles only")
      .flag("--dense-embedding-grad",
            "price the embedding's gradient as PyTorch and Megatron-LM make it: a dense [V/tp + positions, D]\n"
            "gradient zero-filled and added into the f32 main gradient per micro-batch; roofline profiles\n"
            "only (the engine scatter-adds the tokens' rows)")
      .flag("--fsdp2-copy-out",
            "price PyTorch FSDP2's all-gather copy-out: before each block's forward and again before its\n"
            "backward, one kernel copying the gathered parameters out of the flat all-gather buffer on the\n"
            "compute stream (reads and writes the gathered bytes); optimizer.zero_stage 3 and a roofline\n"
            "profile only (the engine gathers into the parameters' own storage)");
}

// How the simulated run communicated and scheduled (apply_communication_options reads them).
void add_communication_option_args(ArgParser& p) {
  p.flag("--overlap-grad-reduce",
            "price the run's gradient reduction as overlapped block by block with the last micro-batch's\n"
            "backward, and ZeRO-1/2's parameter gather with the next forward (Megatron-LM's\n"
            "--overlap-grad-reduce --overlap-param-gather, FSDP; the engine reduces after the backward)")
      .text("--param-gather-dtype", "DTYPE",
            "what ZeRO-1/2's parameter all-gather after the step moves: f32 (the default: the f32 master\n"
            "values, as the engine gathers them) or bf16 (the bf16 parameters, as Megatron-LM's\n"
            "distributed optimizer does; needs device.precision bf16)")
      .flag("--blocking-p2p",
            "price the run's pipeline point-to-point as blocking: each batch of sends and receives holds\n"
            "the rank until all its transfers are done, a transfer starting once both ends posted\n"
            "(Megatron-LM of 2021: batch_isend_irecv, wait, torch.cuda.synchronize; the engine's are\n"
            "asynchronous)")
      .flag("--optimizer-post-validation",
            "price the step as the longest per-rank span (first action to the end of its optimizer step),\n"
            "not the makespan: the run does not synchronise its pp ranks before the optimizer step, so\n"
            "consecutive steps overlap (the zero-bubble paper's post-validation; the engine synchronises)")
      .flag("--auto-schedule-priced",
            "schedule auto: search the schedule on this estimate's priced F, I, W (the median over the\n"
            "stages, as the zero-bubble paper's scheduler) and P2P transfers, under the config's\n"
            "parallel.auto_schedule_* memory options (without it: the cost model's FLOP ratio, no P2P)")
      .flag("--tp-comm-overlap",
            "price a block's tp collectives as running under that block's compute of the same pass\n"
            "(Megatron-Core's --tp-comm-overlap; needs parallel.sequence_parallel)")
      .number("--ep-imbalance", "F",
              "expert parallelism: the busiest ep rank's routed rows over the mean, the time only (default 0:\n"
              "the --profile's figure measured by cleave profile at the plan's ep, else the expected figure\n"
              "for uniformly random top-k routing; docs/planner.md#expert-parallelism)", 0, 0);
  add_ep_memory_args(p);
}

ArgParser simulate_config_args() {
  ArgParser p("simulate --config",
              "cleave simulate --config CONFIG --world N [--profile FILE] [--memory-limit SIZE] [--set k=v ...]\n"
              "                [--json] [--svg FILE] [--trace FILE] [--scatter-gather] [--explain]\n"
              "                [--attention memory_efficient|probabilities|probabilities_dropout]\n"
              "                [--attention-kernel NAME] [--ep-imbalance F]\n"
              "                [--ep-stash-imbalance S] [--ep-peak-imbalance P]\n"
              "                [--overlap-grad-reduce] [--tp-comm-overlap]\n"
              "                [--param-gather-dtype f32|bf16] [--cross-entropy fused|float32|torch_float32] [--hidden-dropout]\n"
              "                [--dense-embedding-grad] [--blocking-p2p] [--selective-recompute attention|torchtitan_op]\n"
              "                [--norm fused|torch_unfused] [--fsdp2-copy-out] [--auto-schedule-priced]\n"
              "                [--optimizer-post-validation]",
              R"(Simulates one training step of the plan CONFIG describes on N ranks with the planner's costs (cost model
FLOPs at a hardware profile's rates, tp all-reduces, P2P, dp reduction, optimizer) and prints the step time,
bubble, where the time goes, and per pp rank the memory plan by category and its timeline's peak.)");
  p.text("--config", "CONFIG", "the config whose plan to simulate")
      .count("--world", "N", "ranks the config runs on (required)", std::nullopt)
      .text("--profile", "FILE", "hardware profile (profiles/*.json); default: measure this machine now")
      .size("--memory-limit", "SIZE", "cap per rank, e.g. 64MiB (default: device.memory_limit, else the profile's)")
      .config_overrides()
      .flag("--json", "print one JSON object (with the memory timeline and breakdown_s, the step term by term)\n"
                      "instead of the summary")
      .flag("--explain", "print the predicted step term by term (compute per block and pass, recomputation,\n"
                         "tp, cp, ep, ZeRO, dp, optimizer, P2P, bubble; they sum to the step)")
      .text("--svg", "FILE", "write an SVG timeline")
      .text("--trace", "FILE", "write a Chrome trace JSON")
      .flag("--scatter-gather",
            "price Megatron-LM's scatter/gather of boundary tensors: each tp rank sends 1/tp of a\n"
            "stage's output, the receiving tp group all-gathers it (the engine sends whole tensors)");
  add_kernel_option_args(p);
  add_communication_option_args(p);
  return p;
}

// Every term by name (seconds per step; they sum to step_s), the hidden time, the busiest rank, compute per
// block kind and pass, and the five coarse groups under their earlier names.
nlohmann::json breakdown_json(const planner::StepBreakdown& b) {
  nlohmann::json terms = nlohmann::json::object(), hidden = nlohmann::json::object(), blocks = nlohmann::json::array();
  for (int t = 0; t < planner::kNumStepTerms; ++t) {
    const std::string name(planner::step_term_info(static_cast<planner::StepTerm>(t)).name);
    terms[name] = b.seconds[static_cast<std::size_t>(t)];
    hidden[name] = b.hidden[static_cast<std::size_t>(t)];
  }
  for (const auto& k : b.blocks) {
    blocks.push_back({{"block", k.block}, {"blocks", k.blocks}, {"forward", k.forward_s}, {"input_grad", k.input_grad_s},
                      {"weight_grad", k.weight_grad_s}, {"recompute", k.recompute_s}});
  }
  nlohmann::json out = terms;
  out["total"] = b.total();
  out["hidden"] = hidden;
  out["rank"] = b.rank;
  out["blocks"] = blocks;
  out["groups"] = {{"compute", b.compute_s}, {"tp_comm", b.tp_comm_s}, {"idle", b.idle_s}, {"dp_comm", b.dp_comm_s},
                   {"optimizer", b.optimizer_s}};
  return out;
}

// A roofline profile prices kernels the engine does not run (--attention, --cross-entropy, --norm ...); a measured
// one times the engine's own.
bool prices_other_kernels(const planner::HardwareProfile& profile) {
  return profile.has_roofline() && !profile.measured.has_blocks();
}

// The kernels the simulated run launched (--attention ... --selective-recompute) into `options` and `profile`, each
// checked against the config and the profile before anything is estimated.
void apply_kernel_options(const Args& args, const config::RunConfig& base, const std::string& config_path,
                          planner::HardwareProfile& profile, planner::SearchOptions& options) {
  if (args.given("--attention")) {
    const std::string kind = args.text("--attention");
    const auto parsed = partition::attention_kind_from(kind);
    CLEAVE_CHECK_INPUT(parsed.has_value(), "simulate --config: --attention '{}' is not an attention kind (memory_efficient, "
                 "probabilities, probabilities_dropout)", kind);
    CLEAVE_CHECK_INPUT(*parsed == partition::AttentionKind::kMemoryEfficient || prices_other_kernels(profile),
                 "simulate --config: --attention {} needs a roofline profile (profiles/*.json with gemm_efficiency); "
                 "profile '{}' times the engine's own memory-efficient attention", kind, profile.name);
    options.attention = *parsed;
  }
  if (args.given("--attention-kernel")) {
    const std::string kernel = args.text("--attention-kernel");
    CLEAVE_CHECK_INPUT(prices_other_kernels(profile) && profile.attention_rates.has_kernel(kernel),
                 "simulate --config: --attention-kernel {}: profile '{}' has no attention_rates for it (a roofline "
                 "profile's published kernel benchmarks; profiles/README.md)", kernel, profile.name);
    profile.attention_kernel = kernel;
  }
  if (args.given("--cross-entropy")) {
    const std::string kind = args.text("--cross-entropy");
    const auto parsed = partition::cross_entropy_kind_from(kind);
    CLEAVE_CHECK_INPUT(parsed.has_value(), "simulate --config: --cross-entropy '{}' is not a loss kind (fused, float32, torch_float32)", kind);
    options.run_kernels.cross_entropy = *parsed;
  }
  options.run_kernels.hidden_dropout = args.on("--hidden-dropout");
  options.run_kernels.dense_embedding_grad = args.on("--dense-embedding-grad");
  options.fsdp2_copy_out = args.on("--fsdp2-copy-out");
  CLEAVE_CHECK_INPUT(!options.fsdp2_copy_out || (base.optimizer.zero_stage == 3 && prices_other_kernels(profile)),
               "simulate --config: --fsdp2-copy-out prices FSDP2's parameter copy-out under ZeRO-3 on a roofline profile "
               "(profiles/*.json with gemm_efficiency), but {} has optimizer.zero_stage {} and profile '{}'{} (set "
               "optimizer.zero_stage 3, or drop the option)",
               config_path, base.optimizer.zero_stage, profile.name,
               prices_other_kernels(profile) ? "" : " times the engine's own kernels");
  if (args.given("--norm")) {
    const std::string kind = args.text("--norm");
    CLEAVE_CHECK_INPUT(kind == "fused" || kind == "torch_unfused",
                 "simulate --config: --norm '{}' is not a norm kind (fused, torch_unfused)", kind);
    options.run_kernels.torch_rmsnorm = kind == "torch_unfused";
  }
  CLEAVE_CHECK_INPUT(!options.run_kernels.any() || prices_other_kernels(profile),
               "simulate --config: --cross-entropy float32, --hidden-dropout, --dense-embedding-grad and --norm torch_unfused need a roofline profile (profiles/*.json "
               "with gemm_efficiency); profile '{}' times the engine's own kernels", profile.name);
  if (args.given("--selective-recompute")) {
    const std::string kind = args.text("--selective-recompute");
    const auto parsed = partition::selective_recompute_from(kind);
    CLEAVE_CHECK_INPUT(parsed.has_value(), "simulate --config: --selective-recompute '{}' is not a policy (attention, torchtitan_op)",
                 kind);
    CLEAVE_CHECK_INPUT(*parsed == partition::SelectiveRecompute::kAttention ||
                     (base.train.recompute == config::Recompute::kSelective && prices_other_kernels(profile)),
                 "simulate --config: --selective-recompute {} prices train.recompute selective on a roofline profile "
                 "(profiles/*.json with gemm_efficiency), but {} has train.recompute {} and profile '{}'{} (set "
                 "train.recompute selective, or drop the option)",
                 kind, config_path, enum_name(base.train.recompute), profile.name,
                 prices_other_kernels(profile) ? "" : " times the engine's own kernels");
    options.selective_recompute = *parsed;
  }
}

// How the simulated run communicated and scheduled (--overlap-grad-reduce ... --ep-imbalance) into `options`, each
// checked against the config and the profile before anything is estimated.
void apply_communication_options(const Args& args, const config::RunConfig& base, const std::string& config_path,
                                 const planner::HardwareProfile& profile, planner::SearchOptions& options) {
  options.overlap_grad_reduce = args.on("--overlap-grad-reduce");
  options.overlap_tp_comm = args.on("--tp-comm-overlap");
  options.blocking_p2p = args.on("--blocking-p2p");
  options.optimizer_post_validation = args.on("--optimizer-post-validation");
  options.auto_schedule_priced = args.on("--auto-schedule-priced");
  CLEAVE_CHECK_INPUT(!options.auto_schedule_priced || base.parallel.schedule == "auto",
               "simulate --config: --auto-schedule-priced searches schedule auto on the estimate's prices, but {} has "
               "parallel.schedule \"{}\" (set parallel.schedule auto, or drop the option)",
               config_path, base.parallel.schedule);
  CLEAVE_CHECK_INPUT(!options.auto_schedule_priced || !profile.measured.has_blocks(),
               "simulate --config: --auto-schedule-priced prices from a hardware profile, but profile '{}' is measured "
               "(use parallel.auto_schedule_profile, which the search reads directly, or drop the option)",
               profile.name);
  if (args.given("--param-gather-dtype")) {
    const std::string dtype = args.text("--param-gather-dtype");
    CLEAVE_CHECK_INPUT(dtype == "f32" || dtype == "bf16",
                 "simulate --config: --param-gather-dtype '{}' is f32 (the engine's f32 master values) or bf16 (Megatron-LM's "
                 "distributed optimizer)", dtype);
    CLEAVE_CHECK_INPUT(dtype == "f32" || base.device.precision == config::Precision::kBf16,
                 "simulate --config: --param-gather-dtype bf16 gathers a bf16 run's parameters, but {} has device.precision "
                 "f32 (set device.precision bf16, or drop the option)", config_path);
    options.param_gather_bf16 = dtype == "bf16";
  }
  CLEAVE_CHECK_INPUT(!options.overlap_tp_comm || base.parallel.sequence_parallel,
               "simulate --config: --tp-comm-overlap needs parallel.sequence_parallel true in {} (Megatron-Core overlaps "
               "sequence parallelism's all-gathers and reduce-scatters with the GEMMs; set it or drop the flag)",
               config_path);
  options.ep_imbalance = args.number("--ep-imbalance");
  CLEAVE_CHECK_INPUT(options.ep_imbalance == 0 || options.ep_imbalance >= 1,
               "simulate --config: --ep-imbalance {} is below 1 (the busiest rank's rows over the mean); use 0 for the "
               "default (the profile's measured figure at the plan's ep, else the workload's) or a value >= 1", options.ep_imbalance);
  CLEAVE_CHECK_INPUT(options.ep_imbalance == 0 || partition::routed_experts(run_plan::model_spec(base.model)) > 0,
               "simulate --config: --ep-imbalance {} prices expert parallelism, and model.type {} has no experts (only "
               "\"moe\" has); drop --ep-imbalance", options.ep_imbalance, base.model.type);
  options.ep_memory = ep_memory_imbalance(args, "simulate --config", base);
  // At ep 1 nothing reads them (as train and verify refuse the config's keys there, whatever their value); `cleave
  // plan` takes them for its ep > 1 candidates, and the one plan simulated here is the config's, at its own ep.
  if (base.parallel.expert_model_parallel_size == 1) {
    for (const auto& [flag, value] : {std::pair{"--ep-imbalance", options.ep_imbalance},
                                      {"--ep-stash-imbalance", options.ep_memory.stash},
                                      {"--ep-peak-imbalance", options.ep_memory.peak}}) {
      CLEAVE_CHECK_INPUT(value == 0, "simulate --config: {} {}", flag,
                         partition::ep_figure_at_ep_one(value, fmt::format("drop {} (cleave plan takes it for its ep "
                                                                           "> 1 candidates)", flag)));
    }
  }
}

// What the summary and the JSON report besides the estimate: the plan simulated, how it was priced, and the model's
// parameters (all of them, and those one token runs through: fewer in a mixture of experts, top_k of n_experts).
struct Simulated {
  const planner::PlanChoice& choice;
  const planner::PlanEstimate& estimate;
  const planner::PlanDetails& details;
  const planner::HardwareProfile& profile;
  const planner::SearchOptions& options;
  std::string unit;  // "tok" for a language model, else "samples"
  std::int64_t total_params = 0;
  std::int64_t active_params = 0;
  // The memory plan's ep figures as it sized the rows (options.ep_memory, the dropless bound where not given).
  partition::EpMemoryImbalance ep_memory{1.0};
};

// Per pp rank: the memory plan by category, the cp K/V exchange, the timeline and its peak.
nlohmann::json ranks_json(const planner::PlanDetails& details) {
  nlohmann::json ranks = nlohmann::json::array();
  for (std::size_t r = 0; r < details.memory_plan.size(); ++r) {
    nlohmann::json plan = nlohmann::json::object();
    for (int c = 0; c < kNumMemoryCategories; ++c) {
      plan[std::string(memory_category_name(static_cast<MemoryCategory>(c)))] = details.memory_plan[r][static_cast<std::size_t>(c)];
    }
    nlohmann::json line = nlohmann::json::array();
    for (const auto& p : details.memory_timeline[r]) line.push_back({p.time_s, p.bytes});
    ranks.push_back({{"pp_rank", r}, {"memory_plan", plan}, {"memory_plan_total", details.memory_total[r]},
                     {"cp_exchange_bytes", details.cp_exchange[r]},
                     {"host_pinned_bytes", details.host_pinned[r]}, {"timeline_peak_bytes", details.timeline_peak[r]},
                     {"memory_timeline", line}});
  }
  return ranks;
}

// The --json object's fields but ep_exchange_s (simulated_json).
nlohmann::json simulated_fields(const Simulated& s) {
  const planner::PlanChoice& choice = s.choice;
  const planner::PlanEstimate& e = s.estimate;
  const planner::SearchOptions& options = s.options;
  return {{"layout", choice.layout()},
          {"schedule", choice.schedule},
          {"virtual_stages", choice.virtual_stages},
          {"micro_batch", choice.micro_batch},
          {"zero_stage", choice.zero_stage},
          {"sequence_parallel", choice.sequence_parallel},
          {"expert_parallel", choice.ep},
          {"ep_imbalance", e.ep_imbalance},
          {"ep_imbalance_source", std::string(enum_name(e.ep_imbalance_source))},
          {"ep_memory_imbalance", {{"stash", s.ep_memory.stash}, {"peak", s.ep_memory.peak}}},
          {"ep_all_to_all_s", e.ep_all_to_all_s},
          {"comm_bytes", e.comm_bytes},
          {"param_count", s.total_params},
          {"active_param_count", s.active_params},
          {"recompute", std::string(enum_name(choice.recompute))},
          {"profile", s.profile.name},
          {"attention", std::string(partition::attention_kind_name(options.attention))},
          {"attention_kernel", s.profile.attention_kernel},
          {"cross_entropy", std::string(partition::cross_entropy_kind_name(options.run_kernels.cross_entropy))},
          {"hidden_dropout", options.run_kernels.hidden_dropout},
          {"dense_embedding_grad", options.run_kernels.dense_embedding_grad},
          {"fsdp2_copy_out", options.fsdp2_copy_out},
          {"norm", options.run_kernels.torch_rmsnorm ? "torch_unfused" : "fused"},
          {"selective_recompute", std::string(partition::selective_recompute_name(options.selective_recompute))},
          {"overlap_grad_reduce", options.overlap_grad_reduce},
          {"overlap_tp_comm", options.overlap_tp_comm},
          {"blocking_p2p", options.blocking_p2p},
          {"optimizer_post_validation", options.optimizer_post_validation},
          {"auto_schedule_priced", options.auto_schedule_priced},
          {"param_gather_dtype", options.param_gather_bf16 ? "bf16" : "f32"},
          {"step_s", e.step_s},
          {s.unit + "_per_s", e.items_per_s},
          {"bubble_fraction", e.bubble},
          {"fits", e.fits},
          {"core_sharing", e.core_sharing},
          {"memory_limit", options.memory_limit},
          {"breakdown_s", breakdown_json(e.breakdown)},
          {"ranks", ranks_json(s.details)}};
}

// Under ep: one moe block's exchanges per micro-batch, their own time and the waits at them (EpExchangePrice), the
// split the router log measures (moe_ep_<kind>_ms, moe_ep_<kind>_wait_ms).
nlohmann::json ep_exchange_json(const planner::EpExchangePrice& x) {
  return {{"all_to_all", x.all_to_all_s}, {"meetings", x.meetings_s},         {"count_exchange", x.count_exchange_s},
          {"own", x.own_s()},             {"peer_wait", x.peer_wait_s},       {"imbalance_wait", x.imbalance_wait_s},
          {"wait", x.wait_s()}};
}

// --json: one object with the plan, the pricing options, the estimate, its breakdown and the ranks' memory (and,
// under ep, ep_exchange_s).
nlohmann::json simulated_json(const Simulated& s) {
  nlohmann::json j = simulated_fields(s);
  if (s.choice.ep > 1) j["ep_exchange_s"] = ep_exchange_json(s.estimate.ep_exchange);
  return j;
}

// Per pp rank, one line: the memory plan's total and its categories, the cp K/V exchange, the timeline's peak.
void print_rank_memory(const planner::PlanDetails& details) {
  for (std::size_t r = 0; r < details.memory_plan.size(); ++r) {
    std::string parts;
    // The plan's total (what the cap check compares), not the categories' sum: the buffers an attention block holds
    // only while it runs count what they add above the activation peak.
    const std::int64_t total = details.memory_total[r];
    for (int c = 0; c < kNumMemoryCategories; ++c) {
      const std::int64_t b = details.memory_plan[r][static_cast<std::size_t>(c)];
      if (b > 0) parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", memory_category_name(static_cast<MemoryCategory>(c)), format_bytes(b));
      if (c == static_cast<int>(MemoryCategory::kCommunication) && details.cp_exchange[r] > 0) {
        parts += fmt::format(" (cp K/V exchange {})", format_bytes(details.cp_exchange[r]));
      }
    }
    const std::string pinned =
        details.host_pinned[r] > 0 ? fmt::format("; host pinned {} (not device memory)", format_bytes(details.host_pinned[r]))
                                   : std::string();
    std::printf("pp rank %zu: memory plan %s (%s); timeline peak %s%s\n", r, format_bytes(total).c_str(), parts.c_str(),
                format_bytes(details.timeline_peak[r]).c_str(), pinned.c_str());
  }
}

// The text summary: the plan, the parameters, the step, where the busiest rank's time goes (term by term with
// --explain), expert parallelism, each rank's memory, and the warnings.
void print_summary(const Simulated& s, const std::string& config_path, int world, bool explain) {
  const planner::PlanChoice& choice = s.choice;
  const planner::PlanEstimate& e = s.estimate;
  std::printf("cleave simulate --config %s on %d ranks: %s, %s (v %d), micro %lld, ZeRO %d, recompute %s\n"
              "profile: %s\n",
              config_path.c_str(), world, choice.layout().c_str(), choice.schedule.c_str(), choice.virtual_stages,
              static_cast<long long>(choice.micro_batch), choice.zero_stage, std::string(enum_name(choice.recompute)).c_str(), s.profile.name.c_str());
  std::printf("parameters: %lld total, %lld active per %s (%.1f%%)\n", static_cast<long long>(s.total_params),
              static_cast<long long>(s.active_params), s.unit == "tok" ? "token" : "sample",
              100.0 * static_cast<double>(s.active_params) / static_cast<double>(s.total_params));
  std::printf("predicted step %.3f ms | %.0f %s/s | bubble %.3f\n", e.step_s * 1e3, e.items_per_s, s.unit.c_str(), e.bubble);
  std::printf("busiest rank: compute %.3f ms, tp all-reduce %.3f ms, idle %.3f ms, dp reduction %.3f ms, optimizer "
              "%.3f ms\n",
              e.breakdown.compute_s * 1e3, e.breakdown.tp_comm_s * 1e3, e.breakdown.idle_s * 1e3,
              e.breakdown.dp_comm_s * 1e3, e.breakdown.optimizer_s * 1e3);
  if (choice.ep > 1) {
    const std::string source = planner::describe_ep_imbalance({e.ep_imbalance, e.ep_imbalance_source},
                                                              s.profile.routing_imbalance);
    std::printf("expert parallelism ep%d: busiest rank's routed rows %.3fx the mean (%s; --ep-imbalance sets it); one "
                "moe block's four all-to-alls per micro-batch %.3f ms (the expert_all_to_all term, in the tp figure "
                "above); the memory plan's rows at %.3fx summed over the blocks and %.3fx in the busiest block "
                "(--ep-stash-imbalance, --ep-peak-imbalance; the dropless bound where not given)\n",
                choice.ep, e.ep_imbalance, source.c_str(), e.ep_all_to_all_s * 1e3, s.ep_memory.stash, s.ep_memory.peak);
  }
  if (explain) {
    std::printf("the predicted step, term by term (busiest pp rank %d):\n", e.breakdown.rank);
    for (const auto& line : planner::breakdown_table(e.breakdown, true)) std::printf("%s\n", line.c_str());
  }
  print_rank_memory(s.details);
  if (e.oversubscribed()) std::printf("warning: %s\n", planner::oversubscription_warning(e).c_str());
  if (!e.fits) std::printf("OVER THE CAP: %s\n", e.reason.c_str());
}

// --svg and --trace: the simulated timeline, titled with the plan and the predicted step.
void write_timeline_files(const std::string& svg, const std::string& trace, const Simulated& s) {
  const planner::PlanChoice& choice = s.choice;
  const pipeline::TraceOptions trace_options{
      fmt::format("{} {} micro {} recompute {}: simulated with {}", choice.layout(), choice.schedule, choice.micro_batch,
                  choice.recompute, s.profile.name),
      fmt::format("step {:.3f} ms, bubble {:.3f}", s.estimate.step_s * 1e3, s.estimate.bubble), "s", 1e6};
  if (!svg.empty()) create_parent_dirs("simulate --config: --svg", svg);
  if (!trace.empty()) create_parent_dirs("simulate --config: --trace", trace);
  if (!svg.empty()) pipeline::write_timeline_svg(s.details.simulated.lowered, s.details.simulated.timeline, svg, trace_options);
  if (!trace.empty()) pipeline::write_chrome_trace(s.details.simulated.timeline, trace, trace_options);
}

}  // namespace

int run_simulate_config(int argc, char** argv) {
  const ArgParser parser = simulate_config_args();
  const Args args = parser.parse(argc, argv);
  if (parser.print_help_if_asked(args)) return 0;
  const std::string config_path = args.text("--config");
  const std::string profile_path = args.text("--profile");
  const auto limit = args.size("--memory-limit");
  const std::string limit_text = limit ? std::to_string(*limit) : std::string();  // the planner's form
  const std::string svg = args.text("--svg");
  const std::string trace = args.text("--trace");
  const std::vector<std::string> overrides = args.all("--set");
  const int world = args.given("--world") ? static_cast<int>(args.count("--world")) : 0;
  CLEAVE_CHECK_INPUT(world >= 1, "simulate --config: --world N is required (the ranks the config runs on)");
  if (!svg.empty()) check_output_file("simulate --config: --svg", svg);  // before the simulation, never over a file
  if (!trace.empty()) check_output_file("simulate --config: --trace", trace);
  check_distinct_outputs("simulate --config", {{"--svg", svg}, {"--trace", trace}});
  const config::RunConfig base = config::load_config(config_path, overrides);
  // A --profile measured for another model or precision cannot serve this config: the command line's input (exit 64),
  // as a missing or malformed one is. This machine measured now always fits.
  auto [profile, options] = profile_path.empty()
                                ? planner::planning_setup(base, profile_path, limit_text, world)
                                : reading_input([&] { return planner::planning_setup(base, profile_path, limit_text, world); });
  if (const auto w = partition::load_warning(profile.load_check, profile.name)) std::fprintf(stderr, "warning: %s\n", w->c_str());
  options.scatter_gather_boundaries = args.on("--scatter-gather");
  apply_kernel_options(args, base, config_path, profile, options);
  apply_communication_options(args, base, config_path, profile, options);
  const planner::PlanChoice choice = planner::choice_of_config(config_path, overrides, world);
  planner::PlanDetails details;
  const planner::PlanEstimate e = planner::estimate_plan(config_path, overrides, choice, profile, options, &details);
  // The config's own plan refused (a refused key named with where it came from, "config FILE: key: ..."): bad input.
  CLEAVE_CHECK_INPUT(e.valid, "simulate --config: {}", e.reason);
  const partition::ModelSpec spec = run_plan::model_spec(base.model);
  const Simulated simulated{choice, e, details, profile, options,
                            partition::is_language_model(base.model.type) ? "tok" : "samples",
                            partition::unique_param_count(spec, 0, spec.blocks.size()),
                            partition::active_param_count(spec),
                            run_plan::ep_memory_figures(spec, base, options.ep_memory)};
  write_timeline_files(svg, trace, simulated);
  if (args.on("--json")) {
    std::printf("%s\n", simulated_json(simulated).dump(2).c_str());
  } else {
    print_summary(simulated, config_path, world, args.on("--explain"));
  }
  return e.fits ? 0 : 1;
}

}  // namespace cleave::cli

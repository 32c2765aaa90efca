// `cleave profile CONFIG [--out FILE] [--world N] [--tp LIST] [--micro-batches LIST] [--repeats N] [--rounds R]
// [--warm-caches] [--ep-imbalance-steps N] [--set key=value ...]`, alone or under mpirun: measures this machine for
// CONFIG's model with the real layers and kernels (engine/planner/profile_measure.hpp) and writes a hardware profile
// (profiles/README.md) whose measured tables `cleave plan --profile` and `cleave simulate --config --profile` use
// instead of FLOP rates: each block shape's forward, input-gradient and weight-gradient time at every tensor-parallel
// width and micro-batch size the planner will consider for N ranks, and (under mpirun) alpha-beta fits of
// point-to-point and all_reduce / reduce_scatter / all_gather per group size; for a model with routed experts, the
// routing imbalance of the config's own training at ep = the ranks (profile_routing.hpp).
// `cleave profile --gemm ...` measures a GPU's GEMM efficiency instead (profile_gemm.cpp).
// Invariant: the output file is never overwritten, and is written only after every measurement succeeded.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/bench/bench_machine.hpp"
#include "engine/cli/args.hpp"
#include "engine/cli/commands.hpp"
#include "engine/cli/profile_routing.hpp"
#include "engine/cli/runtime_env.hpp"
#include "engine/cli/utc_date.hpp"
#include "engine/config/config.hpp"
#include "engine/core/english.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/core/output_path.hpp"
#include "engine/core/log.hpp"
#include "engine/core/progress.hpp"
#include "engine/planner/hardware_profile.hpp"
#include "engine/planner/expert_rows_measure.hpp"
#include "engine/planner/host_routing_measure.hpp"
#include "engine/planner/load_control.hpp"
#include "engine/planner/profile_measure.hpp"
#include "engine/planner/ep_exchange_measure.hpp"
#include "engine/planner/sync_wait.hpp"
#include "engine/planner/time_sharing.hpp"
#include "kernels/ops/ops.hpp"
#include "engine/run_plan/plan.hpp"
#include "partition/ep_rules.hpp"
#include "partition/tp_rules.hpp"

namespace cleave::cli {
namespace {

ArgParser profile_args() {
  ArgParser p("profile",
              "[mpirun -np R] cleave profile CONFIG.json [--out FILE] [--world N] [--tp LIST]\n"
              "                   [--micro-batches LIST] [--repeats K] [--rounds R] [--warm-caches]\n"
              "                   [--ep-imbalance-steps N]\n"
              "                   [--set key.path=value ...]",
              R"(Measures this machine for CONFIG's model and writes a hardware profile for `cleave plan --profile FILE`:
  - every distinct block's forward, input-gradient and weight-gradient time (the real layers and kernels;
    R rounds of K runs after a warm-up, the median of the rounds' medians) at each tensor-parallel width
    and micro-batch size the planner considers for N ranks; under mpirun every rank computes at once, as
    in training, and the times are the mean over ranks;
  - under mpirun (R >= 2): point-to-point, all_reduce, reduce_scatter and all_gather times from 4 KiB to
    4 MiB, fitted as latency + bytes / bandwidth per group size (2, 4, ... and R);
  - a model with routed experts under mpirun: the config's training for N steps at ep = R on its own data,
    the busiest ep rank's routed rows over the mean (the planner's ep imbalance at ep R).
Blocks are timed in the config's device.precision (fp32, or bf16 mixed precision as the trainer runs it:
bf16 activations and weight working copies); plans read a profile only in its own precision.
Threads per rank and pinning follow `cleave train`'s rule (engine/train/threads.hpp): run it with the ranks
per node you will train with.)");
  p.positional("CONFIG.json", "config file")
      .text("--out", "FILE", "where to write the profile (default profile.json; never overwritten)", "profile.json")
      .count("--world", "N", "ranks the plans will use (default: the mpirun world size); sets the tp widths",
             std::nullopt)
      .count_list("--tp", "LIST",
                  "tensor-parallel widths to time, e.g. 1,2,4 (default: every width dividing\n"
                  "n_heads and d_ff and N)")
      .count_list("--micro-batches", "LIST",
                  "micro-batch sizes to time, e.g. 1,2,4, each a divisor of the global batch (default:\n"
                  "its divisors up to 32; the planner interpolates between them)")
      .count("--repeats", "K", "timed runs per measurement after one warm-up", 5)
      .count("--rounds", "R",
             "passes over every measurement (default 5); each measurement is the median of its\n"
             "rounds, so a burst of load from a neighbour slows one round, not the whole entry",
             5)
      .flag("--warm-caches",
            "time warm caches only (by default each pass runs with the caches evicted and then\n"
            "again at once, warm: a plan whose rank's working set fits its share of the\n"
            "last-level cache takes from the warm table, a large one from the cold)")
      .count("--ep-imbalance-steps", "N",
             "a model with routed experts, under mpirun: train the config for N steps at ep = the ranks\n"
             "(dp = ep, nothing else split) and record each step's busiest ep rank's routed rows over\n"
             "the mean, the planner's default ep imbalance at that ep (0: not measured)",
             8, 0)
      .config_overrides();
  return p;
}

// What one `cleave profile` run was asked for on the command line.
struct ProfileCommand {
  std::string config_path, out_path;
  std::vector<std::string> overrides;
  int plan_world = 0;  // 0: the mpirun world size
  int repeats = 0, rounds = 0;
  bool cold_caches = true;
  int ep_imbalance_steps = 0;  // 0: the routing imbalance is not measured
};

ProfileCommand read_command(const Args& args) {
  ProfileCommand c;
  c.config_path = args.positional(0);
  c.out_path = args.text("--out");
  c.overrides = args.all("--set");
  c.plan_world = args.given("--world") ? static_cast<int>(args.count("--world")) : 0;
  c.repeats = static_cast<int>(args.count("--repeats"));
  c.rounds = static_cast<int>(args.count("--rounds"));
  c.cold_caches = !args.on("--warm-caches");
  c.ep_imbalance_steps = static_cast<int>(args.count("--ep-imbalance-steps"));
  CLEAVE_CHECK_INPUT(!c.config_path.empty(),
                     "profile: give the config whose model to measure (see cleave profile --help)");
  CLEAVE_CHECK_INPUT(!std::filesystem::exists(c.out_path), "profile: {} exists; not overwriting it (choose another --out)",
               c.out_path);
  check_output_file("profile: --out", c.out_path);  // its directory writable, before minutes of measuring
  return c;
}

// --tp t: a width the model's family splits over and that divides its heads and d_ff; throws naming both.
void check_tp_width(const partition::ModelSpec& spec, int t) {
  const auto can_split = [](const partition::Family& f) { return f.check_tensor_parallel != nullptr; };
  CLEAVE_CHECK_INPUT(t == 1 || can_split(partition::family(spec.type)),
               "profile: --tp {}: only a {} splits over tensor-parallel ranks", t,
               partition::family_names(can_split, "or"));
  if (t == 1) return;
  const auto allowed = partition::family(spec.type).tp_sizes(spec);
  if (std::find(allowed.begin(), allowed.end(), t) != allowed.end()) return;
  const auto g = spec.token_sizes();
  std::string why = fmt::format("tp sizes this model allows: {}", fmt::join(allowed, ", "));
  try {
    partition::check_tensor_parallel(spec, t);
  } catch (const ConfigKeyError& e) {
    why = e.what();
  }
  throw InputError(fmt::format("profile: --tp {} does not divide n_heads {} and d_ff {} ({}); give one of those sizes",
                               t, g.n_heads, g.d_ff, why));
}

// The tensor-parallel widths to time: --tp, else every width the family allows that divides the planned world.
std::vector<int> tp_widths_to_time(const Args& args, const partition::ModelSpec& spec, int plan_world,
                                   std::vector<int> widths) {
  if (args.given("--tp")) {
    widths.clear();
    for (auto t : args.counts("--tp")) widths.push_back(static_cast<int>(t));
  } else if (const auto tp_sizes = partition::family(spec.type).tp_sizes) {
    widths.clear();
    for (auto t : tp_sizes(spec)) {
      if (plan_world % t == 0) widths.push_back(static_cast<int>(t));
    }
  }
  for (int t : widths) check_tp_width(spec, t);
  return widths;
}

// The global batch the plans for `plan_world` ranks keep, as the planner fixes it: batch.global_batch_size, else
// what the config's own layout resolves to on plan_world ranks (nullopt, with `why`, when it does not resolve).
std::optional<std::int64_t> plans_global_batch(const config::RunConfig& config, int plan_world, std::string& why) {
  if (config.batch.global_batch_size) return *config.batch.global_batch_size;
  config::RunConfig resolved = config;
  try {
    resolved.resolve(plan_world);
  } catch (const Error& e) {
    why = e.what();
    return std::nullopt;
  }
  return resolved.resolved_batch().global_batch_size;
}

// The micro-batch sizes to time: --micro-batches, else the divisors of the global batch up to 32. A size given that
// does not divide the global batch is bad input, as `cleave train` refuses such a micro-batch: no plan of this config
// runs it, so the minutes spent timing it would serve none.
std::vector<std::int64_t> micro_batches_to_time(const Args& args, const config::RunConfig& config, int plan_world) {
  std::string why;
  const std::optional<std::int64_t> global = plans_global_batch(config, plan_world, why);
  const std::string whence = config.batch.global_batch_size
                                 ? std::string("batch.global_batch_size")
                                 : fmt::format("micro_batch_size x gradient_accumulation_steps x dp on {}: "
                                               "batch.global_batch_size is unset",
                                               count_of(plan_world, "rank"));
  std::vector<std::int64_t> divisors;
  for (std::int64_t m = 1; global && m <= std::min<std::int64_t>(*global, 32); ++m) {
    if (*global % m == 0) divisors.push_back(m);
  }
  if (!args.given("--micro-batches")) {
    CLEAVE_CHECK_INPUT(global.has_value(),
                       "profile: the micro-batch sizes to time are the divisors of the global batch, and this config "
                       "sets no batch.global_batch_size and its layout does not resolve on {} ({}); nothing was "
                       "measured (set batch.global_batch_size, give --world N for the plans' world, or list "
                       "--micro-batches)",
                       count_of(plan_world, "rank"), why);
    return divisors;
  }
  std::vector<std::int64_t> sizes = args.counts("--micro-batches");
  if (!global) return sizes;  // no global batch to hold them to: the planner asks for one itself
  std::vector<std::int64_t> stray;
  for (std::int64_t m : sizes) {
    if (*global % m != 0) stray.push_back(m);
  }
  CLEAVE_CHECK_INPUT(stray.empty(),
                     "profile: --micro-batches {} {} not divide the global batch {} ({}): no plan of this config runs "
                     "such a micro-batch (cleave train refuses one that does not divide the batch), so timing it "
                     "would serve none; nothing was measured. Give divisors of {} (up to 32: {}; the default without "
                     "--micro-batches), or set batch.global_batch_size to a multiple of the sizes you want timed",
                     fmt::join(stray, ", "), stray.size() == 1 ? "does" : "do", *global, whence, *global,
                     fmt::join(divisors, ", "));
  return sizes;
}

// GEMM and memory rates (used only where the tables do not reach), measured by rank 0 while the others wait;
// an empty profile on the other ranks.
planner::HardwareProfile measure_rates(const partition::ModelSpec& spec, comm::Communicator& comm) {
  planner::HardwareProfile profile;
  if (comm.rank() == 0) {
    const auto g = partition::is_language_model(spec.type) ? spec.token_sizes() : partition::ModelSpec::TokenSizes{};
    profile = partition::is_language_model(spec.type) ? planner::calibrate_this_machine(comm.size(), 4 * g.seq_len,
                                                                   g.d_ff > 0 ? g.d_ff : 4 * g.d_model, g.d_model)
                                 : planner::calibrate_this_machine(comm.size(), 256, 256, 256);
  }
  comm.barrier()->wait();
  return profile;
}

// Rank 0: the profile's name, node shape, memory, links and source sentence from what was measured.
void describe_profile(planner::HardwareProfile& profile, const ProfileCommand& cmd, const bench::BenchMachine& machine,
                      int ranks, int plan_world, double seconds) {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  const int per_node = std::max(plan_world, machine.ranks_on_node);
  profile.name = fmt::format("this machine: {} ({} cores), {} x {}, profiled {}", machine.cpu_model, machine.cores,
                             count_of(ranks, "rank"), count_of(machine.threads_per_rank, "thread"), utc_date_today());
  profile.ranks_per_node = per_node;
  // The tables were timed with this node's ranks sharing its cores: a plan with more ranks per node is
  // priced by its smaller share (HardwareProfile::core_sharing).
  profile.cores_per_node = machine.cores;
  profile.measured_cores = machine.cores;
  profile.measured_ranks_per_node = machine.ranks_on_node;
  // The node's memory over its ranks; unknown (sysconf cannot say): no cap ("none"), never an invented size.
  profile.device_memory = pages > 0 && page > 0 ? static_cast<std::int64_t>(pages) * page / per_node : 0;
  if (profile.measured.p2p) {
    profile.intra_node = {profile.measured.p2p->latency_s, profile.measured.p2p->bandwidth_Bps};
    profile.inter_node = profile.intra_node;
  }
  profile.source = fmt::format(
      "measured by `cleave profile {}` on {} in {:.1f} s: block tables from the real layers (median of {} "
      "rounds of the median of {} after a warm-up, {}, mean over ranks); {}; device memory = physical "
      "memory / {} ranks. Before that: {}",
      cmd.config_path, count_of(ranks, "rank"), seconds, cmd.rounds, cmd.repeats,
      cmd.cold_caches ? fmt::format("cold caches and again warm; {} of last-level cache per rank",
                                    format_bytes(profile.measured.cache_bytes_per_rank))
                      : std::string("warm caches"),
      ranks >= 2 ? "P2P and collective fits from timed runs of 4 KiB..4 MiB (the link entries are the P2P "
                   "fit; inter_node repeats it: one node measured)"
                 : "no collectives measured (one rank; run under mpirun for them): links are defaults",
      per_node, profile.source);
}

// Rank 0's stdout: the block tables, the optimizer rates and the fits.
void print_profile(const planner::HardwareProfile& profile, bool cold_caches) {
  std::printf("%-44s %3s %6s %10s %10s %10s %s\n", "block", "tp", "micro", "fwd ms", "igrad ms", "wgrad ms",
              cold_caches ? "  (warm: fwd igrad wgrad)" : "");
  for (const auto& b : profile.measured.blocks) {
    std::printf("%-44s %3d %6lld %10.3f %10.3f %10.3f", b.shape.c_str(), b.tp, static_cast<long long>(b.micro_batch),
                b.forward_s * 1e3, b.input_grad_s * 1e3, b.weight_grad_s * 1e3);
    if (b.has_warm()) {
      std::printf("   %8.3f %8.3f %8.3f", b.warm_forward_s * 1e3, b.warm_input_grad_s * 1e3, b.warm_weight_grad_s * 1e3);
    }
    std::printf("\n");
  }
  const auto print_fit = [](std::string_view op, const partition::AlphaBeta& f) {
    std::printf("%-16s ranks %2d: latency %8.1f us, bandwidth %7.2f GB/s\n", std::string(op).c_str(), f.ranks, f.latency_s * 1e6,
                f.bandwidth_Bps / 1e9);
  };
  std::printf("optimizer step per parameter: adamw %.2f ns, sgd %.2f ns, sgd with momentum %.2f ns; "
              "gradient norm %.2f ns, clip %.2f ns\n",
              profile.measured.adamw_s_per_param * 1e9, profile.measured.sgd_s_per_param * 1e9,
              profile.measured.sgd_momentum_s_per_param * 1e9, profile.measured.grad_norm_s_per_param * 1e9,
              profile.measured.grad_clip_s_per_param * 1e9);
  if (profile.measured.p2p) print_fit("p2p", *profile.measured.p2p);
  for (const auto& entry : enum_table<partition::Collective>()) {
    for (const auto& f : profile.measured.fits(entry.value)) print_fit(entry.name, f);
  }
  if (profile.measured.sync_wait_per_compute > 0) {
    std::printf("sync wait: %.3f s waited at a meeting of the ranks per s of compute before it, and %.1f us at every "
                "meeting; compute stretch (mean / median of short compute - 1): %.3f, of a 50 ms stream without a "
                "meeting: %.3f\n",
                profile.measured.sync_wait_per_compute, profile.measured.sync_wait_per_meeting_s * 1e6,
                profile.measured.compute_stretch, profile.measured.stream_stretch);
  }
  if (const auto& t = profile.measured.time_sharing) {
    std::printf("time sharing: %d ranks on one core compute %.2fx their own core's time; a handoff between them "
                "%.1f us polling with a yield, %.1f us spinning\n",
                t->ranks_per_core, t->compute_ratio, t->handoff_s * 1e6, t->handoff_spin_s * 1e6);
  }
  if (profile.measured.count_exchange_s > 0) {
    std::printf("count exchange (all-to-all of int64 counts) over %d ranks: %.1f us back to back\n",
                profile.measured.count_exchange_ranks, profile.measured.count_exchange_s * 1e6);
  }
  for (const auto& x : profile.measured.ep_exchange) {
    std::printf("expert dispatch's row exchange (all_to_all_v) over %d ranks: %.1f us + bytes a rank at %.3f GB/s\n",
                x.ranks, x.latency_s * 1e6, x.bandwidth_Bps / 1e9);
  }
  for (const auto& b : profile.measured.blocks) {
    if (b.routed_rows.empty()) continue;
    std::string rows;
    std::int64_t with_rows = 0;
    for (std::int64_t r : b.routed_rows) {
      rows += fmt::format("{}{}", rows.empty() ? "" : ", ", r);
      with_rows += r > 0 ? 1 : 0;
    }
    std::printf("routed rows per expert of %s tp%d micro-batch %lld (distinct random tokens, a fresh router): [%s], "
                "%lld of %zu experts with rows\n",
                b.shape.c_str(), b.tp, static_cast<long long>(b.micro_batch), rows.c_str(),
                static_cast<long long>(with_rows), b.routed_rows.size());
  }
  if (const auto& r = profile.routing_imbalance) {
    std::string steps;
    for (double f : r->per_step) steps += fmt::format("{}{:.3f}", steps.empty() ? "" : ", ", f);
    std::printf("routing imbalance at ep%d: the busiest ep rank's routed rows %.3fx the mean (%d steps of the config's "
                "training at micro-batch %lld: %s; the planner's default ep imbalance at ep%d)\n",
                r->ep, r->busiest_over_mean, r->steps, static_cast<long long>(r->micro_batch), steps.c_str(), r->ep);
  }
  for (const auto& x : profile.measured.host_routing) {
    std::printf("host routing, E %lld k %lld: F %.1f us + %.1f ns/token, I %.1f us + %.1f ns/token (tokens %lld to "
                "%lld; held in the block times above)\n",
                static_cast<long long>(x.experts), static_cast<long long>(x.top_k), x.intercept.forward_s * 1e6,
                x.per_token.forward_s * 1e9, x.intercept.input_grad_s * 1e6, x.per_token.input_grad_s * 1e9,
                static_cast<long long>(x.tokens.front()), static_cast<long long>(x.tokens.back()));
  }
  for (const auto& x : profile.measured.expert_rows) {
    std::printf("routed experts of %s tp%d: F %.1f us + %.1f ns/row, I %.1f us + %.1f ns/row, W %.1f us + %.1f ns/row "
                "(rows %lld to %lld)\n",
                x.shape.c_str(), x.tp, x.intercept.forward_s * 1e6, x.per_row.forward_s * 1e9,
                x.intercept.input_grad_s * 1e6, x.per_row.input_grad_s * 1e9, x.intercept.weight_grad_s * 1e6,
                x.per_row.weight_grad_s * 1e9, static_cast<long long>(x.rows.front()),
                static_cast<long long>(x.rows.back()));
  }
}

// Rank 0's stdout: the control's speed over the profile and the load average; one line more, on stderr, when the
// profile looks disturbed (partition::judge_load), with its numbers and the fix.
void print_load_check(const partition::LoadCheck& check) {
  const partition::LoadVerdict v = partition::judge_load(check);
  std::printf("load check: control compute moved %.1f%% over %zu timings (worst spread within one %.1f%%); load "
              "average %.2f at the start, %.2f at the end, on %d cores\n",
              v.drift * 100, check.controls.size(), v.spread * 100, check.loadavg_start, check.loadavg_end,
              check.cores);
  if (v.disturbed) {
    log::warn("profile: this profile looks disturbed: {}. Its times may be up to 2x slow and every plan priced from "
              "it with them; re-run `cleave profile` on a quiet machine or with fewer ranks",
              v.what);
  }
}

// A model with routed experts on 2 ranks or more: the routing imbalance of the config's own training at ep = the
// ranks (profile_routing.hpp); where that layout cannot run it, a warning naming why (the planner then prices the
// formula for uniformly random routing).
void measure_routing(planner::HardwareProfile& profile, const partition::ModelSpec& spec, const ProfileCommand& cmd,
                     const config::RunConfig& config, comm::Communicator& comm, ProgressLine& progress) {
  if (cmd.ep_imbalance_steps == 0 || partition::routed_experts(spec) == 0 || comm.size() < 2) return;
  progress.line(fmt::format("the routing imbalance: {} steps of the config's training at ep {}, {}",
                            cmd.ep_imbalance_steps, comm.size(), format_seconds(progress.elapsed_s())));
  std::string why;
  profile.routing_imbalance = measure_routing_imbalance(config, cmd.config_path, cmd.ep_imbalance_steps, comm, why);
  if (!profile.routing_imbalance && comm.rank() == 0) {
    log::warn("profile: the routing imbalance was not measured: {}; plans with ep price the formula for uniformly "
              "random routing (or give cleave plan --ep-imbalance)", why);
  }
}

// The measurements in turn (progress on rank 0's stderr): GEMM and memory rates (rank 0), the block tables, the
// optimizer step, and with two ranks or more p2p and collectives. `threads` per rank, as the trainer runs them.
planner::HardwareProfile measure_profile(const partition::ModelSpec& spec, const planner::BlockProfileRequest& request,
                                         const ProfileCommand& cmd, const config::RunConfig& config,
                                         const bench::BenchMachine& machine, comm::Communicator& comm,
                                         ProgressLine& progress, planner::LoadRecorder& load) {
  const int threads = machine.threads_per_rank;
  progress.line("GEMM and memory rates (rank 0)");
  planner::HardwareProfile profile = measure_rates(spec, comm);
  ops::configure_cpu_threads(threads);  // calibrate set its own thread count
  profile.measured.ranks = comm.size();
  profile.measured.threads_per_rank = threads;
  profile.measured.dtype = config.device.precision == config::Precision::kBf16 ? DType::kBF16 : DType::kF32;
  load.control("start", comm);  // the control between sections: whether the machine's speed moved (load_check)
  if (cmd.cold_caches) {  // both tables: the planner needs each rank's share of the cache to choose between them
    profile.measured.cache_bytes_per_rank =
        planner::cache_bytes_per_rank(planner::last_level_cache(), machine.ranks_on_node, threads);
  }
  planner::measure_blocks(profile.measured, spec, request, &comm);       // its evictor reads the share recorded above
  planner::measure_expert_rows(profile.measured, spec, request, &comm);  // nothing without routed experts
  planner::measure_host_routing(profile.measured, spec, request, &comm);  // likewise
  measure_routing(profile, spec, cmd, config, comm, progress);  // likewise
  ops::configure_cpu_threads(threads);  // the trainer set its own
  load.control("after the block tables", comm);
  progress.line(fmt::format("optimizer step (adamw, sgd, sgd with momentum; gradient norm, clip), {}",
                            format_seconds(progress.elapsed_s())));
  planner::measure_optimizer(profile.measured, 1 << 21, cmd.repeats, cmd.rounds, &comm, request.precision);
  load.control("after the optimizer", comm);
  if (comm.size() >= 2) {
    progress.line(fmt::format("p2p and collectives over {} ranks, {}", comm.size(), format_seconds(progress.elapsed_s())));
    planner::measure_collectives(profile.measured, comm);
    progress.line(fmt::format("waits at a meeting per second of compute, {}", format_seconds(progress.elapsed_s())));
    const planner::SyncWaitMeasure meet = planner::measure_sync_wait(comm);
    profile.measured.sync_wait_per_compute = meet.wait_per_compute;
    profile.measured.compute_stretch = meet.compute_stretch;
    profile.measured.stream_stretch = meet.stream_stretch;
    profile.measured.sync_wait_per_meeting_s = meet.wait_per_meeting;
    profile.measured.count_exchange_s = meet.exchange_s;
    profile.measured.count_exchange_ranks = comm.size();
    const auto sizes = planner::ep_exchange_sizes(spec, request.micro_batches,
                                                  request.precision == ops::Precision::kBf16 ? 2 : 4);
    if (!sizes.empty()) {  // nothing without routed experts
      progress.line(fmt::format("the expert dispatch's row exchange at {} to {} B a rank, {}",
                                static_cast<long long>(sizes.front().bytes()),
                                static_cast<long long>(sizes.back().bytes()), format_seconds(progress.elapsed_s())));
      profile.measured.ep_exchange = planner::measure_ep_exchange(comm, sizes, cmd.rounds, cmd.cold_caches);
    }
    load.control("after the collectives and waits", comm);
    if (!machine.oversubscribed) {  // already sharing cores, the pinned pair would measure three ranks on one
      progress.line(fmt::format("two ranks on one core: compute and handoffs, {}", format_seconds(progress.elapsed_s())));
      ops::configure_cpu_threads(1);  // pinning moves the calling thread only
      if (const auto shared = planner::measure_time_sharing(comm)) {
        profile.measured.time_sharing = partition::MeasuredCosts::TimeSharing{
            shared->ranks_per_core, shared->compute_ratio, shared->handoff_s, shared->handoff_spin_s,
            "ranks 0 and 1 pinned to one core (sched_setaffinity): a 384-GEMM 128^3 f32 stream there over the same "
            "on its own core (median of 5 rounds, mean of the two ranks); a 1-count ping-pong between them, half the "
            "round trip (median), the waiter polling with a yield (the trainer's wait when ranks outnumber cores) "
            "and spinning"};
      }
      ops::configure_cpu_threads(threads);
    }
  }
  load.control("end", comm);
  return profile;
}

}  // namespace

int run_profile(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--gemm") return run_profile_gemm(argc, argv);
  }
  const ArgParser parser = profile_args();
  const Args args = parser.parse(argc, argv);
  if (parser.print_help_if_asked(args)) return 0;
  const ProfileCommand cmd = read_command(args);
  const config::RunConfig config = config::load_config(cmd.config_path, cmd.overrides);
  CLEAVE_CHECK_INPUT(config.device.type == DeviceType::kCpu,
               "profile: device.type {} is not profiled yet: cleave profile times CPU ranks; use a shipped profile "
               "(profiles/) for GPUs, or measure its GEMM efficiency with `cleave profile --gemm --base FILE`",
               config.device.type);

  CommandRuntime runtime(&argc, &argv);
  return runtime.run([&] {
    // What to time, from the command line and the config alone: a width or size no plan can use is refused here,
    // alike on every rank, before the world is built and anything is measured.
    const int plan_world = cmd.plan_world > 0 ? cmd.plan_world : runtime.world_size();
    const partition::ModelSpec spec = run_plan::model_spec(config.model);
    planner::BlockProfileRequest request;
    request.repeats = cmd.repeats;
    request.rounds = cmd.rounds;
    request.cold_caches = cmd.cold_caches;
    request.precision = config.device.precision;  // the tables are for this precision only
    request.tp_widths = tp_widths_to_time(args, spec, plan_world, request.tp_widths);
    request.micro_batches = micro_batches_to_time(args, config, plan_world);

    // Threads per rank and pinning by the trainer's rule (engine/train/threads.hpp), so the tables hold what
    // `cleave train` will run.
    const bench::BenchMachine machine = bench::place_rank_for_bench();
    const int threads = machine.threads_per_rank;
    comm::World world = runtime.world(config);
    comm::Communicator& comm = *world.comm;
    const bool root = comm.rank() == 0;

    if (root) {
      log::info("profile: {} on {} x {}, for plans on {}: tp {}, micro-batches {}", cmd.config_path,
                count_of(comm.size(), "rank"), count_of(threads, "thread"), count_of(plan_world, "rank"),
                fmt::join(request.tp_widths, ","),
                fmt::join(request.micro_batches, ","));
      if (machine.oversubscribed) {
        log::warn("profile: {} ranks on {} cores: oversubscribed; the times include waiting for a core",
                  machine.ranks_on_node, machine.cores);
      }
    }
    const auto start = std::chrono::steady_clock::now();
    // Progress on rank 0's stderr: a line per phase and, for the block tables, a line per measurement on a
    // terminal (redrawn in place), else one every 10 s.
    ProgressLine progress("profile", root);
    request.progress = [&progress](int done, int total, const std::string& what) {
      progress.update(done, total, "block", what);
    };
    planner::LoadRecorder load("/proc/loadavg", machine.cores, machine.ranks_on_node * threads);
    planner::HardwareProfile profile = measure_profile(spec, request, cmd, config, machine, comm, progress, load);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    profile.load_check = load.finish(seconds);

    if (root) {
      describe_profile(profile, cmd, machine, comm.size(), plan_world, seconds);
      create_parent_dirs("profile: --out", cmd.out_path);
      std::ofstream out(cmd.out_path);
      out << planner::profile_to_json(profile).dump(2) << "\n";
      CLEAVE_CHECK(out.good(), "profile: could not write {}", cmd.out_path);
      print_profile(profile, cmd.cold_caches);
      std::printf("wrote %s (%.1f s)\n", cmd.out_path.c_str(), seconds);
      print_load_check(*profile.load_check);
    }
    return 0;
  });
}

}  // namespace cleave::cli

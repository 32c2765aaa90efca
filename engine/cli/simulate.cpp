// `cleave simulate`: builds (or loads) a pipeline schedule, validates and lowers it, times one training
// step with the event-driven simulator and reports makespan, both bubble fractions and peak activations
// per rank; optionally writes a Chrome trace, an SVG timeline and the schedule's text form.
//
// Bad flags and values throw Error with a one-line message (main prints it and exits non-zero). Times
// are in milliseconds throughout; the bubble definitions are pipeline/timeline.hpp's.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/cli/args.hpp"
#include "engine/cli/commands.hpp"
#include "engine/core/allocator.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/core/output_path.hpp"
#include "pipeline/schedule_chart.hpp"
#include "pipeline/schedule_text.hpp"
#include "pipeline/schedules/auto_schedule.hpp"
#include "pipeline/schedules/schedules.hpp"
#include "pipeline/lowering.hpp"
#include "pipeline/overlap_schedule.hpp"
#include "pipeline/simulator.hpp"
#include "pipeline/trace.hpp"
#include "pipeline/validator.hpp"

namespace cleave::cli {
namespace {

// Sizes past these are refused at once instead of simulated for hours: 1024 pipeline ranks take ~10 s and the
// time grows as the square of the ranks; 65536 micro-batches on 4 ranks take ~15 s. Both at once grow faster than
// their product (2 vCPU Zen 4, 1f1b: 1024 x 1024 38 s, 1024 x 2048 95 s, 1024 x 65536 hours), so the stages times
// the micro-batches are bounded too: 2^20, 40-50 s at the worst shape (1024 x 1024).
constexpr std::int64_t kMaxStages = 1024;
constexpr std::int64_t kMaxMicrobatches = 65536;
constexpr std::int64_t kMaxStageMicrobatches = std::int64_t{1} << 20;

// P x V x M past kMaxStageMicrobatches: bad input, naming the three and what fits.
void check_grid_size(int stages, int virtual_stages, int microbatches) {
  const std::int64_t cells = std::int64_t{stages} * virtual_stages * microbatches;
  CLEAVE_CHECK_INPUT(cells <= kMaxStageMicrobatches,
                     "simulate: --stages {} x {} virtual x --microbatches {} = {} stage micro-batches is past {} (the "
                     "dry run's time grows faster than their product: 1024 x 2048 takes minutes, 1024 x 65536 hours); "
                     "nothing was simulated. Give at most {} micro-batches on {} stages, or fewer stages",
                     stages, virtual_stages, microbatches, cells, kMaxStageMicrobatches,
                     std::max<std::int64_t>(1, kMaxStageMicrobatches / (std::int64_t{stages} * virtual_stages)),
                     stages);
}

ArgParser simulate_args() {
  ArgParser p("simulate", "cleave simulate --schedule S --stages P --microbatches M [options]",
              R"(Simulates one training step of a pipeline schedule with per-action costs and prints the makespan, the
bubble fractions and the peak live activations per rank, followed by the schedule grid.)");
  p.text("--schedule", "S",
         "gpipe | 1f1b | interleaved_1f1b | zb_h1 | zb_h2 | zb_v | dualpipev | auto, or a\n"
         "schedule file in the text form (docs/schedules.md); with a file, P / M / V come\n"
         "from the file. auto builds the automatic zero-bubble schedule for the costs below")
      .count("--stages", "P", "pipeline ranks (pp_size), at most 1024 (the dry run's grid grows as P x steps)",
             std::nullopt, 1, kMaxStages)
      .count("--microbatches", "M", "micro-batches per step, at most 65536, and P x V x M at most 2^20",
             std::nullopt, 1, kMaxMicrobatches)
      .count("--virtual", "V",
             "stages (model chunks) per rank; default 2 for interleaved_1f1b, zb_v and\n"
             "dualpipev, else 1",
             std::nullopt)
      .count("--max-stashes", "N",
             "auto only: live micro-batch stashes per rank (default P, 1F1B's memory; 2P-1 is\n"
             "ZB-H2's)",
             std::nullopt)
      .size("--memory-limit", "SIZE",
            "auto only: bytes per rank (e.g. 96MiB, as in cleave plan), with --stash-bytes B,\n"
            "the bytes one micro-batch's stash holds on a rank: the limit is SIZE / B stashes")
      .size("--stash-bytes", "B", "auto only: the bytes one micro-batch's stash holds on a rank")
      .text("--costs", "F,I,W",
            "ms for one stage's forward, input-gradient and weight-gradient pass\n"
            "(default 1,1,1; a fused backward B costs I + W)")
      .text("--all-to-all", "AF,AB",
            "ms of MoE all-to-all inside one stage's forward and its backward (expert\n"
            "parallelism; default 0,0), on top of --costs")
      .flag("--overlap", "run F&B pairs overlapped (parallel.moe_a2a_overlap: each side's all-to-all\n"
            "hidden behind the other's compute; pipeline/overlap_schedule.hpp)")
      .text("--all-to-all-waits", "NF,NB",
            "with --overlap: the waits each all-to-all splits into (3,2 per MoE block: count\n"
            "exchange, dispatch, combine; their gradients); each hides only behind the other\n"
            "side's segment (pipeline/overlap_pair_timing.hpp). Default 0,0: not split")
      .text("--all-to-all-own", "OF,OB",
            "with --overlap: of --all-to-all, the exchanges' own time (the rank's work\n"
            "inside the calls; over shared memory the copies), which a pair never hides\n"
            "(default 0,0)")
      .flag("--shared-cores", "with --overlap: the ranks outnumber the cores, so what a pair hides buys\n"
            "no step time (a waiting rank's core runs another rank)")
      .number("--p2p-latency", "X", "ms per point-to-point message", 0)
      .number("--p2p-bandwidth", "G", "GB/s per link (default: infinite); used with --message-bytes", 0)
      .number("--message-bytes", "N", "bytes of one activation / gradient message", 0)
      .text("--trace", "FILE", "write a Chrome trace JSON (open in https://ui.perfetto.dev)")
      .text("--svg", "FILE", "write an SVG timeline (ranks as rows, one box per action)")
      .text("--save", "FILE", "write the schedule in the text form (edit it, then pass it to --schedule)")
      .flag("--lowered", "print the lowered grid (with SEND/RECV, REDUCE_GRAD, OPTIMIZER_STEP)")
      .flag("--json", "print one JSON object instead of the summary")
      .epilog(R"(cleave simulate --config CONFIG --world N [--profile FILE] [--memory-limit SIZE] [--set k=v] [--json]
                [--svg FILE] [--trace FILE] [--explain] [--ep-imbalance F] [...]
  (every option of this form: cleave simulate --config CONFIG --help)
  simulates the step of the plan the config describes on N ranks with the planner's costs (cost model
  FLOPs at a hardware profile's rates, tp all-reduces, P2P, dp reduction, optimizer; profiles/*.json or
  this machine measured now), and prints the step time, bubble, where the time goes, and per pp rank the
  memory plan by category and the peak of its memory timeline over the step (--json: the timeline).

bubble_fraction is idle time over ranks × makespan (what a synchronised optimizer step pays);
stage_bubble_fraction is idle time between each rank's own first and last action (docs/architecture.md).

examples:  cleave simulate --schedule 1f1b --stages 4 --microbatches 8
           cleave simulate --schedule zb_v --stages 4 --microbatches 8 --svg zbv.svg --trace zbv.json
           cleave simulate --schedule my_schedule.txt --costs 1,1,2 --json)");
  return p;
}

struct Options {
  std::string schedule;
  std::optional<int> stages, microbatches, virtual_stages, max_stashes;
  std::optional<std::int64_t> memory_limit, stash_bytes;  // bytes, as everywhere else
  double forward = 1.0, backward_input = 1.0, backward_weight = 1.0;
  double latency_ms = 0.0, bandwidth_gbps = 0.0, message_bytes = 0.0;
  double forward_all_to_all = 0.0, backward_all_to_all = 0.0;
  double forward_own = 0.0, backward_own = 0.0;
  bool overlap = false, shared_cores = false;
  int forward_waits = 0, backward_waits = 0;
  std::string trace_path, svg_path, save_path;
  bool lowered = false, json = false;
};

// `count` comma-separated numbers >= 0 (`unit`) of `flag`.
std::vector<double> parse_ms_list(std::string_view text, std::size_t count, const char* flag, const char* form,
                                  const char* unit = "in ms") {
  std::vector<double> values;
  std::size_t pos = 0;
  while (true) {
    const std::size_t comma = text.find(',', pos);
    const std::string_view part = text.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    double value = 0;
    auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
    CLEAVE_CHECK_INPUT(!part.empty() && ec == std::errc() && ptr == part.data() + part.size() && std::isfinite(value) &&
                     value >= 0,
                 "simulate: {} expects {} ({} numbers >= 0, {}), got '{}'", flag, form, count, unit, text);
    values.push_back(value);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  CLEAVE_CHECK_INPUT(values.size() == count, "simulate: {} expects {} ({} numbers >= 0, {}), got '{}'", flag, form,
                     count, unit, text);
  return values;
}

Options read_options(const Args& args) {
  Options options;
  const auto optional_count = [&](const char* name) -> std::optional<int> {
    if (!args.given(name)) return std::nullopt;
    return static_cast<int>(args.count(name));
  };
  options.schedule = args.text("--schedule");
  options.stages = optional_count("--stages");
  options.microbatches = optional_count("--microbatches");
  options.virtual_stages = optional_count("--virtual");
  options.max_stashes = optional_count("--max-stashes");
  options.memory_limit = args.size("--memory-limit");
  options.stash_bytes = args.size("--stash-bytes");
  if (args.given("--costs")) {
    const auto costs = parse_ms_list(args.text("--costs"), 3, "--costs", "F,I,W");
    options.forward = costs[0];
    options.backward_input = costs[1];
    options.backward_weight = costs[2];
  }
  if (args.given("--all-to-all")) {
    const auto a2a = parse_ms_list(args.text("--all-to-all"), 2, "--all-to-all", "AF,AB");
    options.forward_all_to_all = a2a[0];
    options.backward_all_to_all = a2a[1];
  }
  options.overlap = args.on("--overlap");
  options.shared_cores = args.on("--shared-cores");
  if (args.given("--all-to-all-own")) {
    const auto own = parse_ms_list(args.text("--all-to-all-own"), 2, "--all-to-all-own", "OF,OB");
    CLEAVE_CHECK_INPUT(own[0] <= options.forward_all_to_all && own[1] <= options.backward_all_to_all,
                       "simulate: --all-to-all-own {} exceeds --all-to-all {},{}: the own time is part of the "
                       "all-to-all", args.text("--all-to-all-own"), options.forward_all_to_all,
                       options.backward_all_to_all);
    options.forward_own = own[0];
    options.backward_own = own[1];
  }
  if (args.given("--all-to-all-waits")) {
    const auto waits = parse_ms_list(args.text("--all-to-all-waits"), 2, "--all-to-all-waits", "NF,NB",
                                     "whole numbers");
    CLEAVE_CHECK_INPUT(waits[0] == std::floor(waits[0]) && waits[1] == std::floor(waits[1]) && waits[0] <= 1e6 &&
                           waits[1] <= 1e6,
                       "simulate: --all-to-all-waits expects NF,NB (2 whole numbers >= 0), got '{}'",
                       args.text("--all-to-all-waits"));
    options.forward_waits = static_cast<int>(waits[0]);
    options.backward_waits = static_cast<int>(waits[1]);
  }
  options.latency_ms = args.number("--p2p-latency");
  options.bandwidth_gbps = args.number("--p2p-bandwidth");
  options.message_bytes = args.number("--message-bytes");
  options.trace_path = args.text("--trace");
  options.svg_path = args.text("--svg");
  options.save_path = args.text("--save");
  options.lowered = args.on("--lowered");
  options.json = args.on("--json");
  return options;
}

pipeline::SimulationCosts make_costs(const Options& options, int num_stages) {
  pipeline::SimulationCosts costs =
      pipeline::SimulationCosts::uniform(num_stages, options.forward, options.backward_input, options.backward_weight);
  costs.p2p_latency = options.latency_ms;
  costs.p2p_bandwidth = options.bandwidth_gbps * 1e6;  // GB/s = 1e9 bytes / 1e3 ms
  for (auto& stage : costs.stages) {
    stage.output_bytes = options.message_bytes;
    stage.forward_all_to_all = options.forward_all_to_all;
    stage.backward_all_to_all = options.backward_all_to_all;
    stage.forward_all_to_all_own = options.forward_own;
    stage.backward_all_to_all_own = options.backward_own;
    stage.forward_all_to_all_waits = options.forward_waits;
    stage.backward_all_to_all_waits = options.backward_waits;
  }
  if (options.shared_cores) costs.pair_cores = pipeline::PairCores::kShared;
  return costs;
}

// The automatic scheduler's limit in live micro-batch stashes per rank (0 = its default, pp): --max-stashes N,
// or --memory-limit SIZE (bytes per rank, as in plan and simulate --config) over --stash-bytes B (what one
// micro-batch's stash holds on a rank). A byte cap without the stash size has nothing to count with.
int auto_stash_limit(const Options& options) {
  CLEAVE_CHECK_INPUT(!(options.max_stashes && options.memory_limit),
               "simulate: give the auto scheduler's limit once: --max-stashes N or --memory-limit SIZE with "
               "--stash-bytes B, not both");
  if (options.max_stashes) return *options.max_stashes;
  if (!options.memory_limit) {
    CLEAVE_CHECK_INPUT(!options.stash_bytes, "simulate: --stash-bytes sizes --memory-limit; give --memory-limit SIZE too");
    return 0;
  }
  CLEAVE_CHECK_INPUT(options.stash_bytes && *options.stash_bytes > 0,
               "simulate: --memory-limit {} is bytes per rank (as in cleave plan); a schedule simulation needs "
               "--stash-bytes B (one micro-batch's stash on a rank) to turn it into stashes, or give the count "
               "itself with --max-stashes N",
               format_bytes(*options.memory_limit));
  const std::int64_t stashes = *options.memory_limit / *options.stash_bytes;
  CLEAVE_CHECK_INPUT(stashes >= 1, "simulate: --memory-limit {} holds no stash of --stash-bytes {}",
               format_bytes(*options.memory_limit), format_bytes(*options.stash_bytes));
  return static_cast<int>(std::min<std::int64_t>(stashes, 1 << 20));
}

pipeline::Schedule build_schedule(const Options& options) {
  CLEAVE_CHECK_INPUT(!options.schedule.empty(),
                     "simulate: --schedule is required (one of {}, or a schedule file; see cleave simulate --help)",
                     fmt::join(pipeline::schedule_names(), ", "));
  if (pipeline::is_schedule_name(options.schedule)) {
    CLEAVE_CHECK_INPUT(options.stages.has_value(), "simulate: --stages P is required with schedule {}",
                       options.schedule);
    CLEAVE_CHECK_INPUT(options.microbatches.has_value(), "simulate: --microbatches M is required with schedule {}",
                       options.schedule);
    const bool limited = options.max_stashes || options.memory_limit || options.stash_bytes;
    CLEAVE_CHECK_INPUT(!limited || options.schedule == "auto",
                 "simulate: --max-stashes / --memory-limit apply only to --schedule auto, got --schedule {}",
                 options.schedule);
    if (options.schedule == "auto") {
      CLEAVE_CHECK_INPUT(options.virtual_stages.value_or(1) == 1,
                   "simulate: schedule auto runs one stage per rank, got --virtual {}", *options.virtual_stages);
      check_grid_size(*options.stages, 1, *options.microbatches);
      pipeline::AutoScheduleOptions auto_options;
      auto_options.costs = make_costs(options, *options.stages);
      auto_options.memory_limit = auto_stash_limit(options);
      return pipeline::auto_schedule(*options.stages, *options.microbatches, auto_options).schedule;
    }
    const int virtual_stages = options.virtual_stages.value_or(pipeline::default_virtual_stages(options.schedule));
    check_grid_size(*options.stages, virtual_stages, *options.microbatches);
    // Named by the options that set them here (the schedules' own message names the config's keys).
    const int min_microbatches = pipeline::schedule_min_microbatches(options.schedule, *options.stages);
    CLEAVE_CHECK_INPUT(*options.microbatches >= min_microbatches,
                       "simulate: schedule {} needs at least {} micro-batches per step on --stages {}, got "
                       "--microbatches {}; use --microbatches {} or more, or another schedule",
                       options.schedule, min_microbatches, *options.stages, *options.microbatches, min_microbatches);
    try {  // --stages, --microbatches and --virtual the schedule cannot run: the command line's (exit 64)
      pipeline::check_schedule_args(options.schedule, *options.stages, *options.microbatches, virtual_stages);
    } catch (const Error& e) {
      throw InputError(fmt::format("simulate: {}", e.what()));
    }
    return pipeline::make_schedule(options.schedule, *options.stages, *options.microbatches, virtual_stages);
  }
  CLEAVE_CHECK_INPUT(
      std::filesystem::exists(options.schedule),
      "simulate: unknown schedule '{}' (known: {}; or the path of a schedule file, but no such file exists)",
      options.schedule, fmt::join(pipeline::schedule_names(), ", "));
  // The file the command line names: malformed (or a directory) is bad input (exit 64).
  pipeline::Schedule schedule = [&] {
    try {
      return pipeline::load_schedule(options.schedule);
    } catch (const Error& e) {
      throw InputError(fmt::format("simulate: {}", e.what()));
    }
  }();
  auto agree = [&](const char* flag, const std::optional<int>& given, int in_file) {
    CLEAVE_CHECK_INPUT(!given || *given == in_file, "simulate: {} {} disagrees with schedule file '{}', which has {}", flag,
                 given.value_or(0), options.schedule, in_file);
  };
  agree("--stages", options.stages, schedule.pp_size);
  agree("--microbatches", options.microbatches, schedule.num_microbatches);
  agree("--virtual", options.virtual_stages, schedule.virtual_stages);
  return schedule;
}

std::string fraction(double f) { return fmt::format("{:.4f}", f); }

// --json: the schedule, the costs, the step's figures and each rank's.
nlohmann::json simulation_json(const pipeline::Schedule& schedule, const Options& options,
                               const pipeline::SimulationResult& sim) {
  const pipeline::TimelineStats& stats = sim.stats;
  nlohmann::json out = {{"schedule", schedule.name},
                        {"pp_size", schedule.pp_size},
                        {"num_stages", schedule.num_stages},
                        {"virtual_stages", schedule.virtual_stages},
                        {"num_microbatches", schedule.num_microbatches},
                        {"costs_ms", {{"forward", options.forward},
                                      {"backward_input", options.backward_input},
                                      {"backward_weight", options.backward_weight},
                                      {"p2p_latency", options.latency_ms}}},
                        {"makespan", stats.makespan},
                        {"bubble_fraction", stats.bubble_fraction},
                        {"stage_bubble_fraction", stats.stage_bubble_fraction},
                        {"overlapped_pairs", pipeline::count_overlapped_pairs(sim.lowered)},
                        {"exposed_all_to_all", sim.exposed_all_to_all},
                        {"shared_core_all_to_all", sim.shared_core_all_to_all}};
  out["costs_ms"]["forward_all_to_all"] = options.forward_all_to_all;
  out["costs_ms"]["backward_all_to_all"] = options.backward_all_to_all;
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : stats.ranks) {
    ranks.push_back({{"rank", r.rank},
                     {"busy", r.busy},
                     {"bubble_fraction", r.bubble_fraction},
                     {"stage_bubble_fraction", r.stage_bubble_fraction},
                     {"peak_activations", r.peak_activations}});
  }
  out["per_rank"] = ranks;
  return out;
}

// The text report: the costs, the step's figures, a table per rank, the grid of a unit-cost dry run, the files
// written.
std::string simulation_text(const std::string& title, const Options& options, const pipeline::SimulationResult& sim) {
  const pipeline::TimelineStats& stats = sim.stats;
  std::string text = fmt::format("schedule {}\n", title);
  text += fmt::format("costs per stage: F {:.6g} ms, I {:.6g} ms, W {:.6g} ms (B = I + W); p2p latency {:.6g} ms",
                      options.forward, options.backward_input, options.backward_weight, options.latency_ms);
  if (options.bandwidth_gbps > 0) {
    text += fmt::format(", {:.6g} GB/s, {:.6g} bytes per message", options.bandwidth_gbps, options.message_bytes);
  }
  text += fmt::format("\n\nmakespan               {:.6g} ms\n", stats.makespan);
  if (options.forward_all_to_all > 0 || options.backward_all_to_all > 0 || options.overlap) {
    double exposed = 0;
    for (double x : sim.exposed_all_to_all) exposed = std::max(exposed, x);
    text += fmt::format("all-to-all per stage: F {:.6g} ms, B {:.6g} ms; {} F&B pairs overlapped; exposed all-to-all "
                        "{:.6g} ms (the most on one rank)\n",
                        options.forward_all_to_all, options.backward_all_to_all,
                        pipeline::count_overlapped_pairs(sim.lowered), exposed);
  }
  text += fmt::format("bubble_fraction        {}   idle / (ranks × makespan)\n", fraction(stats.bubble_fraction));
  text += fmt::format("stage_bubble_fraction  {}   idle between each rank's own first and last action\n\n",
                      fraction(stats.stage_bubble_fraction));
  text += fmt::format("{:>4}  {:>10}  {:>15}  {:>21}  {:>16}\n", "rank", "busy (ms)", "bubble_fraction",
                      "stage_bubble_fraction", "peak_activations");
  for (const auto& r : stats.ranks) {
    text += fmt::format("{:>4}  {:>10.6g}  {:>15}  {:>21}  {:>16}\n", r.rank, r.busy, fraction(r.bubble_fraction),
                        fraction(r.stage_bubble_fraction), r.peak_activations);
  }
  const pipeline::Schedule& shown = options.lowered ? sim.lowered : pipeline::strip_to_compute(sim.lowered);
  text += fmt::format("\n{} grid, one row per step of a unit-cost dry run (F forward, I input grad, W weight grad, "
                      "B backward = I + W; sFj = stage s, micro-batch j):\n",
                      options.lowered ? "lowered" : "compute");
  text += pipeline::format_grid(shown);
  for (const auto& [path, what] : {std::pair{options.trace_path, "Chrome trace"}, std::pair{options.svg_path, "SVG"},
                                   std::pair{options.save_path, "schedule"}}) {
    if (!path.empty()) text += fmt::format("wrote {} to {}\n", what, path);
  }
  return text;
}

}  // namespace

// --config with an option of the schedule form: the config already fixes what the option would (it was refused as an
// unknown option of simulate --config, which did not say where the value goes).
static void check_one_form(int argc, char** argv) {
  static constexpr std::pair<std::string_view, std::string_view> kScheduleForm[] = {
      {"--schedule", "parallel.schedule"},
      {"--stages", "parallel.pipeline_model_parallel_size"},
      {"--microbatches", "batch.gradient_accumulation_steps"},
      {"--virtual", "parallel.virtual_pipeline_stages"}};
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    for (const auto& [flag, key] : kScheduleForm) {
      if (arg != flag && arg.rfind(std::string(flag) + "=", 0) != 0) continue;
      throw InputError(fmt::format("simulate: --config simulates the config's own plan, and {} belongs to the schedule "
                                   "form (no --config); the config sets it as {}: drop {} and give --set {}=VALUE, "
                                   "or drop --config",
                                   flag, key, flag, key));
    }
  }
}

int run_simulate(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--config") {
      check_one_form(argc, argv);
      return run_simulate_config(argc, argv);
    }
  }
  const ArgParser parser = simulate_args();
  const Args args = parser.parse(argc, argv);
  const Options options = read_options(args);  // before --help: a malformed --costs is refused even then
  if (parser.print_help_if_asked(args)) return 0;
  // Output files: new, in a writable place, checked before the schedule is built (a typo such as
  // `--trace config.json` must not replace a file).
  const std::pair<const char*, const std::string*> outputs[] = {
      {"simulate: --trace", &options.trace_path}, {"simulate: --svg", &options.svg_path},
      {"simulate: --save", &options.save_path}};
  for (const auto& [what, path] : outputs) {
    if (!path->empty()) check_output_file(what, *path);
  }
  check_distinct_outputs("simulate", {{"--trace", options.trace_path}, {"--svg", options.svg_path},
                                      {"--save", options.save_path}});
  pipeline::Schedule schedule = build_schedule(options);
  pipeline::check_schedule(schedule);
  if (options.overlap || schedule.overlap_fb_pairs) {  // --overlap, or a file saved with its pairs overlapped
    schedule = pipeline::overlap_fb_pairs(pipeline::ensure_lowered(schedule));
  }

  const pipeline::SimulationCosts costs = make_costs(options, schedule.num_stages);
  const pipeline::SimulationResult sim = pipeline::simulate(schedule, costs);
  const pipeline::TimelineStats& stats = sim.stats;

  const std::string title = fmt::format("{}: pp_size {}, {} stage{} per rank, {} micro-batches", schedule.name,
                                        schedule.pp_size, schedule.virtual_stages,
                                        schedule.virtual_stages == 1 ? "" : "s", schedule.num_microbatches);
  const std::string subtitle =
      fmt::format("makespan {:.6g} ms, bubble_fraction {}, stage_bubble_fraction {} (costs F {:.6g}, I {:.6g}, W {:.6g} ms)",
                  stats.makespan, fraction(stats.bubble_fraction), fraction(stats.stage_bubble_fraction),
                  options.forward, options.backward_input, options.backward_weight);
  const pipeline::TraceOptions trace_options{title, subtitle, "ms", 1000.0};
  for (const auto& [what, path] : outputs) {
    if (!path->empty()) create_parent_dirs(what, *path);
  }
  if (!options.trace_path.empty()) pipeline::write_chrome_trace(sim.timeline, options.trace_path, trace_options);
  if (!options.svg_path.empty()) pipeline::write_timeline_svg(schedule, sim.timeline, options.svg_path, trace_options);
  if (!options.save_path.empty()) pipeline::save_schedule(schedule, options.save_path);

  if (options.json) {
    std::printf("%s\n", simulation_json(schedule, options, sim).dump().c_str());
    return 0;
  }
  std::fputs(simulation_text(title, options, sim).c_str(), stdout);
  return 0;
}

}  // namespace cleave::cli

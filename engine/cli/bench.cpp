// `cleave bench CONFIG [--schedules all|LIST] [--steps N] [--warmup W] [--out DIR] [--set key=value ...]`
// under mpirun: trains the config under each listed pipeline schedule for real (warm-up, then N measured
// steps) and writes a summary table (stdout), DIR/bench.json and DIR/bench.html (engine/bench/). The result
// is checked first: every schedule's first-step loss must equal the first schedule's (same model, same
// data, same seed), or the bench fails naming both. Ranks are pinned to cores of their own when the node
// has enough (engine/bench/bench_machine.hpp); oversubscription is warned about in every output. Every listed
// schedule is checked before the first run: one the config cannot run (e.g. dualpipev with fewer than 2 x pp
// micro-batches) is skipped and reported with the reason in the table, bench.json ("skipped") and bench.html.
// Invariant: nothing is overwritten (an existing DIR/bench.json or bench.html is refused before any run).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/bench/bench_machine.hpp"
#include "engine/bench/bench_report.hpp"
#include "engine/bench/schedule_run.hpp"
#include "engine/cli/args.hpp"
#include "engine/cli/commands.hpp"
#include "engine/cli/runtime_env.hpp"
#include "engine/config/config.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/core/output_path.hpp"
#include "engine/core/log.hpp"

namespace cleave::cli {
namespace {

struct BenchOptions {
  std::string config_path;
  std::vector<std::string> overrides;
  std::string schedules;
  int steps = 0;
  int warmup = 0;
  std::string out;
};

ArgParser bench_args() {
  ArgParser p("bench",
              "mpirun -np P cleave bench CONFIG.json [--schedules all|LIST] [--steps N] [--warmup W]\n"
              "                                    [--out DIR] [--set key.path=value ...]",
              R"(Trains CONFIG under each pipeline schedule (real steps, evaluation off) and reports, per schedule: median
step time, tokens/s, measured bubble per rank (both definitions), peak memory and P2P bytes per rank, and
the simulator's prediction from the measured per-action costs. Writes DIR/bench.json and DIR/bench.html
(self-contained: predicted and measured timelines per schedule, and the table).)");
  p.positional("CONFIG.json", "config file")
      .text("--schedules", "LIST",
            "'all' (default) or comma-separated names, name:V sets virtual stages\n"
            "(e.g. 1f1b,zb_h1,interleaved_1f1b:4); every one is checked before the first runs,\n"
            "and those the config cannot run are skipped and reported with the reason",
            "all")
      .count("--steps", "N", "measured steps per schedule", 10)
      .count("--warmup", "W", "warm-up steps per schedule, not measured", 3, 0)
      .text("--out", "DIR", "output directory (default bench); bench.json / bench.html there are never overwritten",
            "bench")
      .config_overrides();
  return p;
}

// The listed schedules this config can run, and those it cannot with the reason (a pure check of each one's
// config and plan, the same on every rank). Throws when none can run.
struct Runnable {
  std::vector<bench::ScheduleChoice> runnable;
  std::vector<bench::SkippedSchedule> skipped;
};

Runnable runnable_schedules(const std::vector<bench::ScheduleChoice>& choices, const BenchOptions& o, int world_size,
                            bool root) {
  Runnable out;
  for (const auto& choice : choices) {
    std::string problem = bench::schedule_problem(o.config_path, o.overrides, choice, world_size);
    if (problem.empty()) {
      out.runnable.push_back(choice);
    } else {
      if (root) log::warn("bench: schedule {} cannot run this config, skipped: {}", choice.label(), problem);
      out.skipped.push_back({choice, std::move(problem)});
    }
  }
  if (out.runnable.empty()) {
    std::string reasons;
    for (const auto& k : out.skipped) {
      reasons += fmt::format("{}schedule {} cannot run this config: {}", reasons.empty() ? "" : "; ",
                             k.choice.label(), k.reason);
    }
    // Each reason is the config's or the command line's (a batch the world does not divide, more stages than
    // blocks): bad input, found before any schedule ran.
    throw InputError(fmt::format("bench: no listed schedule can run: {}", reasons));
  }
  return out;
}

// Each runnable schedule trained in turn; every one's first-step loss must equal the first's (same model, data and
// seed), or it is a wrong result, not a timing.
std::vector<bench::ScheduleRun> run_schedules(const std::vector<bench::ScheduleChoice>& runnable, const BenchOptions& o,
                                              comm::Communicator& comm, bool root) {
  std::vector<bench::ScheduleRun> runs;
  for (const auto& choice : runnable) {
    runs.push_back(bench::run_schedule(o.config_path, o.overrides, choice, o.steps, o.warmup, comm));
    const auto& run = runs.back();
    CLEAVE_CHECK(std::abs(run.first_loss - runs.front().first_loss) <= 1e-5 * std::abs(runs.front().first_loss),
                 "bench: schedule {} computes first-step loss {:.9g} but {} computed {:.9g}: a wrong result, not a "
                 "timing",
                 choice.label(), run.first_loss, runs.front().choice.label(), runs.front().first_loss);
    if (root) {
      log::info("bench: {} median step {:.2f} ms, measured bubble {:.3f} (predicted {:.3f})", choice.label(),
                run.median_step_ms, run.measured_stats.bubble_fraction, run.predicted.stats.bubble_fraction);
    }
  }
  return runs;
}

// Rank 0's outputs: the table on stdout, DIR/bench.json and DIR/bench.html (checked absent before any run).
void write_bench_outputs(const BenchOptions& o, const bench::BenchSetup& setup, const std::vector<bench::ScheduleRun>& runs,
                         const std::vector<bench::SkippedSchedule>& skipped) {
  std::filesystem::create_directories(o.out);
  const std::string table = bench::summary_table(setup, runs, skipped);
  std::fputs(table.c_str(), stdout);
  std::ofstream json(std::filesystem::path(o.out) / "bench.json");
  json << bench::bench_json(setup, runs, skipped).dump(2) << "\n";
  CLEAVE_CHECK(json.good(), "bench: could not write {}/bench.json", o.out);
  std::ofstream html(std::filesystem::path(o.out) / "bench.html");
  html << bench::bench_html(setup, runs, skipped);
  CLEAVE_CHECK(html.good(), "bench: could not write {}/bench.html", o.out);
  std::printf("wrote %s/bench.json and %s/bench.html\n", o.out.c_str(), o.out.c_str());
}

}  // namespace

int run_bench(int argc, char** argv) {
  const ArgParser parser = bench_args();
  const Args args = parser.parse(argc, argv);
  if (parser.print_help_if_asked(args)) return 0;
  BenchOptions o;
  o.config_path = args.positional(0);
  o.overrides = args.all("--set");
  o.schedules = args.text("--schedules");
  o.steps = static_cast<int>(args.count("--steps"));
  o.warmup = static_cast<int>(args.count("--warmup"));
  o.out = args.text("--out");
  const std::vector<bench::ScheduleChoice> choices = bench::parse_schedule_list(o.schedules);
  for (const char* name : {"bench.json", "bench.html"}) {
    const auto path = std::filesystem::path(o.out) / name;
    CLEAVE_CHECK_INPUT(!std::filesystem::exists(path), "bench: {} exists; not overwriting it (choose another --out)",
                 path.string());
  }
  check_output_dir("bench: --out", o.out);

  CommandRuntime runtime(&argc, &argv);
  return runtime.run([&] {
    bench::BenchSetup setup;
    setup.machine = bench::place_rank_for_bench();  // before any compute thread exists
    setup.config_path = o.config_path;
    setup.overrides = o.overrides;
    setup.steps = o.steps;
    setup.warmup = o.warmup;
    const config::RunConfig config = bench::bench_config(o.config_path, o.overrides);
    comm::World world = runtime.world(config);
    setup.machine.mpi_progress_thread = world.progress_thread;
    const bool root = world.comm->rank() == 0;
    const auto& p = config.parallel;
    // As the trainer's grid names it (ProcessGrid::str): cp and ep when they are on, dp without them.
    const int cp = p.context_parallel_size, ep = p.expert_model_parallel_size;
    const std::string cp_text = cp > 1 ? fmt::format(" cp={}", cp) : std::string();
    const std::string ep_text = ep > 1 ? fmt::format(" ep={}", ep) : std::string();
    setup.layout = fmt::format("tp={}{} dp={}{} pp={} (world {})", p.tensor_model_parallel_size, cp_text,
                               world.comm->size() / (p.tensor_model_parallel_size * cp * p.pipeline_model_parallel_size),
                               ep_text, p.pipeline_model_parallel_size, world.comm->size());
    if (root) log::info("bench: {} | {}", setup.layout, setup.machine.describe());
    if (root && setup.machine.oversubscribed) {
      log::warn("bench: {} ranks on {} cores: oversubscribed; measured idle time is hidden (see the report)",
                setup.machine.ranks_on_node, setup.machine.cores);
    }
    // Every listed schedule is checked before the first one runs: those the config cannot run are reported with
    // the reason; the bench fails only if none can.
    const Runnable schedules = runnable_schedules(choices, o, world.comm->size(), root);
    const std::vector<bench::ScheduleRun> runs = run_schedules(schedules.runnable, o, *world.comm, root);
    if (root) write_bench_outputs(o, setup, runs, schedules.skipped);
    return 0;
  });
}

}  // namespace cleave::cli

// Pipeline schedule benchmark (run under mpirun): trains the same model under each schedule for real,
// then prints per schedule the median measured step time, the measured bubble per rank, the peak
// activation bytes per rank, and the simulator's prediction for the measured per-action costs, side by
// side (ratio measured / predicted). The result is checked first: every schedule must report the same
// first-step loss as the first schedule (same model, same data), or the benchmark fails.
//
//   mpirun -np 4 pipeline_bench [CONFIG.json] [--set key=value ...] [--schedules a,b,c] [--steps N]
//                                [--warmup W] [--json]
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "engine/comm/mpi/mpi_communicator.hpp"
#include "engine/comm/mpi/mpi_runtime.hpp"
#include "engine/core/allocator.hpp"
#include "engine/core/log.hpp"
#include "engine/train/threads.hpp"
#include "engine/train/trainer.hpp"
#include "pipeline/simulator.hpp"

namespace {

using namespace cleave;

struct Options {
  std::string config_path;
  std::vector<std::string> overrides;
  std::vector<std::string> schedules = {"gpipe", "1f1b", "interleaved_1f1b", "zb_h1", "zb_v"};
  int steps = 10;
  int warmup = 3;
  bool json = false;
};

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto end = text.find(',', start);
    out.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      CLEAVE_CHECK(i + 1 < argc, "pipeline_bench: {} needs a value", a);
      return argv[++i];
    };
    if (a == "--set") o.overrides.push_back(value());
    else if (a == "--schedules") o.schedules = split_commas(value());
    else if (a == "--steps") o.steps = std::stoi(value());
    else if (a == "--warmup") o.warmup = std::stoi(value());
    else if (a == "--json") o.json = true;
    else if (a.starts_with("-")) CLEAVE_THROW("pipeline_bench: unknown option {}", a);
    else o.config_path = a;
  }
  CLEAVE_CHECK(o.steps >= 1 && o.warmup >= 0, "pipeline_bench: --steps must be >= 1 and --warmup >= 0");
  return o;
}

// Mean measured duration of each compute kind per stage, as simulator costs. B actions (fused) are split
// evenly into I and W, which leaves their sum — all the simulator uses for B — exact.
pipeline::SimulationCosts measured_costs(const pipeline::Timeline& timeline, int num_stages) {
  struct Acc { double sum = 0; int n = 0; double mean() const { return n ? sum / n : 0.0; } };
  std::vector<Acc> f(num_stages), in(num_stages), w(num_stages), b(num_stages);
  for (const auto& rank : timeline.ranks) {
    for (const auto& t : rank) {
      const double d = t.end - t.start;
      switch (t.action.kind) {
        case pipeline::ActionKind::kForward: f[t.action.stage].sum += d; ++f[t.action.stage].n; break;
        case pipeline::ActionKind::kBackwardInput: in[t.action.stage].sum += d; ++in[t.action.stage].n; break;
        case pipeline::ActionKind::kBackwardWeight: w[t.action.stage].sum += d; ++w[t.action.stage].n; break;
        case pipeline::ActionKind::kBackward: b[t.action.stage].sum += d; ++b[t.action.stage].n; break;
        default: break;
      }
    }
  }
  pipeline::SimulationCosts costs = pipeline::SimulationCosts::uniform(num_stages);
  for (int s = 0; s < num_stages; ++s) {
    auto& c = costs.stages[static_cast<std::size_t>(s)];
    c.forward = f[s].mean();
    c.backward_input = b[s].n ? b[s].mean() / 2 : in[s].mean();
    c.backward_weight = b[s].n ? b[s].mean() / 2 : w[s].mean();
  }
  return costs;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

int run(int argc, char** argv) {
  const Options options = parse(argc, argv);
  comm::MpiRuntime runtime(&argc, &argv);
  log::set_rank(runtime.world_rank(), runtime.world_size());
  train::configure_threads_for_node();
  comm::MpiOptions mpi_options;
  auto world = runtime.world(mpi_options);
  const bool root = world->rank() == 0;
  double reference_loss = std::nan("");
  if (root && !options.json) {
    std::printf("%-18s %5s %10s %10s %9s %9s %9s  %-28s %s\n", "schedule", "stages", "step_ms", "predicted",
                "ratio", "bubble", "sim_bub", "bubble per rank (measured)", "peak activations per rank");
  }
  for (const auto& schedule : options.schedules) {
    auto overrides = options.overrides;
    overrides.push_back("parallel.schedule=" + schedule);
    overrides.push_back("train.trace=true");
    overrides.push_back("train.steps=" + std::to_string(options.steps + options.warmup));
    overrides.push_back("train.eval_batches=0");
    const config::RunConfig config = config::load_config(options.config_path, overrides);
    train::Trainer trainer(config, *world);
    trainer.reset_peak_memory();
    std::vector<double> step_ms;
    for (int s = 0; s < options.steps + options.warmup; ++s) {
      const auto stats = trainer.step(s);
      if (s == 0) {
        if (std::isnan(reference_loss)) reference_loss = stats.loss;
        CLEAVE_CHECK(std::abs(stats.loss - reference_loss) <= 1e-5 * std::abs(reference_loss),
                     "pipeline_bench: schedule {} computes first-step loss {} but {} computed {}: wrong result",
                     schedule, stats.loss, options.schedules.front(), reference_loss);
      }
      if (s >= options.warmup) step_ms.push_back(stats.step_ms);
    }
    // Peak activation bytes of every rank, gathered on all.
    Tensor mine = Tensor::empty({1}, DType::kI64, MemoryCategory::kWorkspace);
    mine.data<std::int64_t>()[0] = trainer.memory_stats().peak_of(MemoryCategory::kActivations);
    Tensor peaks = Tensor::empty({world->size()}, DType::kI64, MemoryCategory::kWorkspace);
    world->all_gather(mine, peaks)->wait();
    const pipeline::Timeline measured = trainer.measured_timeline();
    if (!root) continue;
    const auto mstats = pipeline::timeline_stats(measured);
    const auto& plan = trainer.plan();
    const auto predicted = pipeline::simulate(plan.schedule, measured_costs(measured, plan.num_stages()));
    const double step = median(step_ms);
    std::string per_rank, peak_text;
    for (const auto& r : mstats.ranks) per_rank += fmt::format("{}{:.2f}", per_rank.empty() ? "" : " ", r.bubble_fraction);
    for (auto p : peaks.span<std::int64_t>()) peak_text += fmt::format("{}{}", peak_text.empty() ? "" : " ", format_bytes(p));
    if (options.json) {
      std::printf("{\"schedule\": \"%s\", \"stages\": %d, \"step_ms\": %.3f, \"measured_makespan_ms\": %.3f, "
                  "\"predicted_makespan_ms\": %.3f, \"bubble_fraction\": %.4f, \"predicted_bubble_fraction\": %.4f, "
                  "\"stage_bubble_fraction\": %.4f}\n",
                  schedule.c_str(), plan.num_stages(), step, mstats.makespan, predicted.stats.makespan,
                  mstats.bubble_fraction, predicted.stats.bubble_fraction, mstats.stage_bubble_fraction);
    } else {
      std::printf("%-18s %5d %10.2f %10.2f %9.2f %9.3f %9.3f  %-28s %s\n", schedule.c_str(), plan.num_stages(), step,
                  predicted.stats.makespan, mstats.makespan / predicted.stats.makespan, mstats.bubble_fraction,
                  predicted.stats.bubble_fraction, per_rank.c_str(), peak_text.c_str());
    }
  }
  if (root && !options.json) {
    std::printf("\nstep_ms: median wall time of a whole step (incl. optimizer) over %d steps after %d warm-up.\n"
                "predicted: simulator makespan of the schedule with the per-stage F/I/W costs measured in the last\n"
                "step (no p2p cost); ratio = measured makespan of that step / predicted. bubble: bubble_fraction\n"
                "(DESIGN §4: idle over ranks x makespan) of the measured last step; sim_bub: the simulator's.\n",
                options.steps, options.warmup);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    cleave::log::error("{}", e.what());
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
}

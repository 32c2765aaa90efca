// `cleave verify CONFIG [--set ...]`: trains the configured layout and a single-rank reference from the
// same seed and reports per-step loss differences and per-parameter differences of the final weights;
// exits non-zero past the tolerance. Run it under mpirun with the layout's world size; a world of one rank (the
// reference against itself) is refused as bad input before any training, and so is a layout `cleave train` would
// refuse before its world (train::plan_before_world: the plan, device.memory_limit, this host's physical memory).
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/cli/args.hpp"
#include "engine/cli/commands.hpp"
#include "engine/cli/runtime_env.hpp"
#include "engine/config/config.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/core/log.hpp"
#include "engine/train/rank_setup.hpp"
#include "engine/train/verify.hpp"

namespace cleave::cli {
namespace {

ArgParser verify_args() {
  ArgParser p("verify", "mpirun -np N cleave verify [CONFIG.json] [--set key.path=value ...] [options]",
              R"(Trains the configured layout (tp x cp x dp x pp, and ep, over N ranks) and, inside rank 0, a single-rank
reference from the same seed, then prints each step's loss in both, and the worst per-parameter differences of the
final weights (gathered into logical tensors). Exits 1 when a difference exceeds its tolerance.)");
  p.positional("CONFIG.json", "config file")
      .config_overrides()
      .count("--steps", "N", "steps to train", 10)
      .number("--loss-tolerance", "X",
              "max relative loss difference per step (bf16 runs: 2^-8 / sqrt(tokens per step), x sqrt((tp + 2) / 2) "
              "at tp > 1)",
              1e-5)
      .number("--param-tolerance", "X", "max |layout - reference| / max |reference| per tensor", 1e-3)
      .number("--noise-multiple", "X",
              "bf16: a tensor also passes within X x sqrt((tp + 2) / 2) times the twin references' noise floor (on the "
              "cpu), or times its precision twin's difference; fp32 AdamW: times its order twins' difference (0: no "
              "twins)",
              3)
      .epilog(R"(Runs in deterministic mode (train.deterministic=true) unless the config or --set says otherwise. With
AdamW, a slice whose gradient is zero in exact arithmetic (gpt's attention key biases) receives rounding
noise only, which Adam normalises into steps up to lr: it leaves --param-tolerance's comparison and is held
to the bound any two AdamW runs meet, 2 x sum over steps of lr x Adam's step bound (docs/multi-rank.md).
In bf16 on the cpu two more single-rank references, the twins, run the same sums in other orders: one with
another GEMM library (device.blas) and its attention reordered (the f32 GEMM over half-size key blocks, P and dS
rounded as in bf16), one with quarter-size key blocks. The largest difference of any two of the three runs, as a
fraction of how far training moved each tensor, is the run's noise floor (under AdamW no less than one sign flip
of its first update, 2 lr_1 / sum of lr); a tensor of the layout passes within --param-tolerance of its scale or
within --noise-multiple x sqrt((tp + 2) / 2) times the floor of its movement. In bf16 a further run, the precision
twin, is the reference in fp32: it ends each tensor as far from the bf16 reference as bf16's roundings move
it, and a tensor also passes within --noise-multiple x sqrt((tp + 2) / 2) times that. In fp32 under AdamW on the
cpu the order twins, the reference with each other GEMM library (device.blas), end each tensor as far from it as
reordering its sums moves it (AdamW turns a near-zero gradient's rounding into a step up to lr), and a tensor also
passes within --noise-multiple x sqrt((tp + 2) / 2) times the largest of those; and each element within that factor
times what the twins' gradient noise moves it through the reference's own AdamW state (lr / sqrt(v) per step: far
for a near-zero gradient, little for a large one; at most AdamW's drift bound). In bf16 under AdamW a step's loss
from step 2 also passes within that factor of the twins' and the fp32 run's loss difference at that step. A moe
layout whose routing differs from one rank's (tokens per expert) fails as "routing diverged", a near-tie when one or
two tokens moved, with the command that checks it with the routing fixed (docs/multi-rank.md: what this proves and
what it cannot).

example: mpirun -np 8 cleave verify examples/gpt_fortunes.json --set parallel.tensor_model_parallel_size=2 \
             --set parallel.pipeline_model_parallel_size=2 --set optimizer.type=sgd)");
  return p;
}

// The same verify with the routing fixed (model.forced_routing uniform), every option the user gave kept: what a run
// whose routing diverged on a near-tie is checked with (train::format_report).
std::string forced_routing_command(const Args& args, const std::string& config_path, std::int64_t steps) {
  std::string out = config_path.empty() ? std::string() : config_path + " ";
  out += fmt::format("--steps {}", steps);
  for (const char* option : {"--loss-tolerance", "--param-tolerance", "--noise-multiple"}) {
    if (args.given(option)) out += fmt::format(" {} {:g}", option, args.number(option));
  }
  for (const auto& o : args.all("--set")) {
    if (o.rfind("model.forced_routing=", 0) != 0) out += " --set " + o;
  }
  return out + " --set model.forced_routing=uniform";
}

}  // namespace

int run_verify(int argc, char** argv) {
  const ArgParser parser = verify_args();
  const Args args = parser.parse(argc, argv);
  if (parser.print_help_if_asked(args)) return 0;
  const std::string config_path = args.positional(0);
  std::vector<std::string> overrides = {"train.deterministic=true", "train.eval_batches=0",
                                        "train.eval_interval=0"};
  for (const auto& o : args.all("--set")) overrides.push_back(o);
  train::VerifyOptions options;
  options.loss_tolerance = args.number("--loss-tolerance");
  options.param_tolerance = args.number("--param-tolerance");
  options.noise_multiple = args.number("--noise-multiple");
  const std::int64_t steps = args.count("--steps");
  overrides.push_back("train.steps=" + std::to_string(steps));
  CommandRuntime runtime(&argc, &argv);
  return runtime.run([&] {
    const train::ThreadPlacement& placement = runtime.place_threads();
    config::RunConfig config = config::load_config(config_path, overrides);
    // One rank runs the layout tp1 pp1 dp1, which is the reference itself: a PASS would prove nothing.
    CLEAVE_CHECK_INPUT(runtime.world_size() > 1,
                       "verify: a world of one rank trains the single-rank reference against itself, which proves "
                       "nothing; run it under mpirun with the layout's ranks, e.g. mpirun -np 2 cleave verify {} --set "
                       "parallel.tensor_model_parallel_size=2",
                       config_path.empty() ? std::string("CONFIG.json") : config_path);
    // The layout's plan, as `cleave train` makes it before the world: a layout the world cannot plan, over
    // device.memory_limit or over this host's physical memory is bad input (exit 64) before anything is built.
    // A layout or batch the world size does not divide: its key named with where it came from, as `cleave train`.
    config::RunConfig(config).resolve(runtime.world_size(), config_path.empty() ? "<defaults>" : config_path,
                                      overrides);
    run_plan::Plan plan = train::plan_before_world(config, runtime.world_size(),
                                                   config_path.empty() ? "<defaults>" : config_path, overrides,
                                                   this_host(placement));
    comm::World world = runtime.world(config);
    config.parallel.comm_backend = world.choice.backend;
    if (!args.given("--loss-tolerance")) {
      config::RunConfig resolved = config;
      resolved.resolve(world.comm->size());
      options.loss_tolerance = train::default_loss_tolerance(resolved);
    }
    const train::VerifyReport report = train::verify_layout(config, *world.comm, options, std::move(plan));
    if (world.comm->rank() != 0) return 0;
    const int size = world.comm->size();
    const auto& p = config.parallel;
    const int tp = p.tensor_model_parallel_size, pp = p.pipeline_model_parallel_size, cp = p.context_parallel_size;
    // The grid's own wording under context parallelism (engine/comm/process_grid.hpp); the historical one otherwise.
    const std::string ep = p.expert_model_parallel_size > 1 ? fmt::format(" ep={}", p.expert_model_parallel_size) : "";
    const std::string layout = cp > 1 ? fmt::format("tp={} cp={} dp={}{} pp={} (world {})", tp, cp,
                                                    size / (tp * cp * pp), ep, pp, size)
                                      : fmt::format("tp={} pp={} dp={}{} (world {})", tp, pp, size / (tp * pp), ep, size);
    std::printf("verify: %s, schedule %s, comm backend %s (%s), %lld steps, against one rank\n\n", layout.c_str(),
                p.schedule.c_str(), std::string(world.comm->backend()).c_str(), world.choice.reason.c_str(),
                static_cast<long long>(steps));
    std::fputs(train::format_report(report, options).c_str(), stdout);
    if (!report.passed && report.routing_diverged) {
      std::printf("  mpirun -np %d cleave verify %s\n", size, forced_routing_command(args, config_path, steps).c_str());
    }
    return report.passed ? 0 : 1;
  });
}

}  // namespace cleave::cli

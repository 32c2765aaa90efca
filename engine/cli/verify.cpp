// `cleave verify CONFIG [--set ...]`: trains the configured layout and a single-rank reference from the
// same seed and reports per-step loss differences and per-parameter differences of the final weights;
// exits non-zero past the tolerance. Run it under mpirun with the layout's world size.
#include <cstdio>
#include <string>
#include <vector>

#include "engine/cli/commands.hpp"
#include "engine/comm/make_communicator.hpp"
#include "engine/comm/mpi/mpi_runtime.hpp"
#include "engine/comm/mpi/wait_notice.hpp"
#include "engine/config/config.hpp"
#include "engine/core/error.hpp"
#include "engine/core/log.hpp"
#include "engine/train/threads.hpp"
#include "engine/train/verify.hpp"

namespace cleave::cli {
namespace {

constexpr const char* kUsage = R"(usage: mpirun -np N cleave verify [CONFIG.json] [--set key.path=value ...] [options]

Trains the configured layout (tp x dp x pp over N ranks) and, inside rank 0, a single-rank reference
from the same seed, then prints each step's loss in both, and the worst per-parameter differences of the
final weights (gathered into logical tensors). Exits 1 when a difference exceeds its tolerance.

options:
  --set key.path=value      override a config key (as for cleave train)
  --steps N                 steps to train (default 10)
  --loss-tolerance X        max relative loss difference per step (default 1e-5)
  --param-tolerance X       max |layout - reference| / max |reference| per tensor (default 1e-3)
  --help                    this text

Runs in deterministic mode (train.deterministic=true) unless the config or --set says otherwise. With
AdamW, parameters whose true gradient is zero (e.g. attention key biases) receive rounding noise that
Adam normalises into lr-sized steps: compare such runs by loss, or verify with optimizer.type=sgd.

example: mpirun -np 8 cleave verify examples/gpt_fortunes.json --set parallel.tensor_model_parallel_size=2 \
             --set parallel.pipeline_model_parallel_size=2 --set optimizer.type=sgd
)";

double parse_double(const std::string& flag, const std::string& text) {
  try {
    std::size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size() && v >= 0) return v;
  } catch (const std::exception&) {
  }
  CLEAVE_THROW("verify: {} expects a non-negative number, got '{}'", flag, text);
}

}  // namespace

int run_verify(int argc, char** argv) {
  std::string config_path;
  std::vector<std::string> overrides = {"train.deterministic=true", "train.eval_batches=0"};
  train::VerifyOptions options;
  std::int64_t steps = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      CLEAVE_CHECK(i + 1 < argc, "verify: {} needs a value", arg);
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (arg == "--set") {
      overrides.push_back(value());
    } else if (arg == "--steps") {
      const double v = parse_double(arg, value());
      CLEAVE_CHECK(v >= 1 && v == static_cast<double>(static_cast<std::int64_t>(v)), "verify: --steps must be a "
                   "positive integer");
      steps = static_cast<std::int64_t>(v);
    } else if (arg == "--loss-tolerance") {
      options.loss_tolerance = parse_double(arg, value());
    } else if (arg == "--param-tolerance") {
      options.param_tolerance = parse_double(arg, value());
    } else if (arg.starts_with("-")) {
      CLEAVE_THROW("verify: unknown option '{}' (see cleave verify --help)", arg);
    } else {
      CLEAVE_CHECK(config_path.empty(), "verify: more than one config file given ('{}' and '{}')", config_path, arg);
      config_path = arg;
    }
  }
  overrides.push_back("train.steps=" + std::to_string(steps));
  comm::MpiRuntime runtime(&argc, &argv);
  comm::report_waits_on_sigterm();  // a rank the launcher ends says what it was waiting for
  log::set_rank(runtime.world_rank(), runtime.world_size());
  try {
    train::configure_threads_for_node();
    config::RunConfig config = config::load_config(config_path, overrides);
    comm::World world = comm::make_world_communicator(
        runtime, config.parallel.comm_backend, config.device.type,
        comm::CommOptions{.timeout_s = config.train.comm_timeout_s, .deterministic = config.train.deterministic},
        config.parallel.p2p_progress);
    config.parallel.comm_backend = world.choice.backend;
    const train::VerifyReport report = train::verify_layout(config, *world.comm, options);
    if (world.comm->rank() != 0) return 0;
    const int size = world.comm->size();
    std::printf("verify: tp=%d pp=%d dp=%d (world %d), schedule %s, comm backend %s (%s), %lld steps, against one "
                "rank\n\n",
                config.parallel.tensor_model_parallel_size, config.parallel.pipeline_model_parallel_size,
                size / (config.parallel.tensor_model_parallel_size * config.parallel.pipeline_model_parallel_size),
                size, config.parallel.schedule.c_str(), std::string(world.comm->backend()).c_str(),
                world.choice.reason.c_str(), static_cast<long long>(steps));
    std::fputs(train::format_report(report, options).c_str(), stdout);
    return report.passed ? 0 : 1;
  } catch (const std::exception& e) {
    if (runtime.world_size() > 1) comm::end_job_after_error(fmt::format("error: {}", e.what()));
    throw;
  }
}

}  // namespace cleave::cli

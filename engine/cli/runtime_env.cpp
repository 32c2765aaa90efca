// See runtime_env.hpp.
#include "engine/cli/runtime_env.hpp"

#include <unistd.h>

#include <cstdlib>

#include "engine/comm/mpi/wait_notice.hpp"
#include "engine/core/error.hpp"
#include "engine/core/log.hpp"

namespace cleave::cli {

void apply_runtime_env(char** argv) {
  if (std::getenv("CLEAVE_RUNTIME_ENV") != nullptr) return;
  bool changed = false;
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    setenv("OMP_WAIT_POLICY", "passive", 0);
    changed = true;
  }
  setenv("CLEAVE_RUNTIME_ENV", "1", 1);
  if (!changed) return;
  execv("/proc/self/exe", argv);
  // exec failed (no /proc): carry on with the library defaults; correctness does not depend on them.
}

CommandRuntime::CommandRuntime(int* argc, char*** argv) : mpi_(argc, argv) {
  log::set_rank(mpi_.world_rank(), mpi_.world_size());
  comm::report_waits_on_sigterm();  // a rank the launcher ends says what it was waiting for
}

const train::ThreadPlacement& CommandRuntime::place_threads() {
  CLEAVE_ASSERT(!placement_, "place_threads called twice: the policy pins the process once, before computing");
  placement_ = train::place_threads_for_node();
  return *placement_;
}

comm::World CommandRuntime::world(const config::RunConfig& config) const {
  return comm::make_world_communicator(
      mpi_, config.parallel.comm_backend, config.device.type,
      comm::CommOptions{.timeout_s = config.train.comm_timeout_s, .deterministic = config.train.deterministic},
      config.parallel.p2p_progress);
}

}  // namespace cleave::cli

// See runtime_env.hpp.
#include "engine/cli/runtime_env.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "engine/comm/mpi/wait_notice.hpp"
#include "engine/core/cpu_features.hpp"
#include "engine/core/error.hpp"
#include "engine/core/log.hpp"
#include "engine/core/physical_memory.hpp"
#include "kernels/cpu/blas_coretype.hpp"
#include "kernels/cpu/blas_runtime.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::cli {
namespace kc = kernels::cpu;

void apply_runtime_env(char** argv) {
  if (std::getenv("CLEAVE_RUNTIME_ENV") != nullptr) return;
  std::string set;  // what this process exports, for the re-executed one's log
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    try {
      const train::WaitPolicyChoice wait = train::omp_wait_policy_for_node();
      setenv("OMP_WAIT_POLICY", std::string(enum_name(wait.policy)).c_str(), 0);
      set = fmt::format("OMP_WAIT_POLICY={} ({})", wait.policy, wait.reason);
    } catch (const std::exception&) {
      // A malformed launcher variable: the thread placement reports it, with its name, once MPI is up.
    }
  }
  const auto blas = kc::decide_blas_coretype(kc::blas_coretype_inputs_of_this_process());
  if (blas.action == kc::BlasCoretypeAction::kSetCoretype) {
    setenv(kc::kCoretypeMarker, kc::blas_core_name().c_str(), 1);
    setenv("OPENBLAS_CORETYPE", blas.coretype.c_str(), 1);
    set += fmt::format("{}OPENBLAS_CORETYPE={}", set.empty() ? "" : ", ", blas.coretype);
  }
  setenv("CLEAVE_RUNTIME_ENV", set.empty() ? "nothing set" : set.c_str(), 1);
  if (set.empty()) return;
  execv("/proc/self/exe", argv);
  // exec failed (no /proc): carry on with the library defaults; correctness does not depend on them, and the
  // BLAS check in the log then says which kernels run.
}

std::pair<std::string, bool> describe_cpu_runtime() {
  const kc::BlasCoretypeInputs in = kc::blas_coretype_inputs_of_this_process();
  const kc::BlasCoretypeDecision blas = kc::decide_blas_coretype(in);
  // In a process that did not go through apply_runtime_env (exec failed), a kSetCoretype means "not applied".
  const bool warns = blas.action != kc::BlasCoretypeAction::kKeep;
  return {fmt::format("{} | {} (core {}): {}", describe_cpu(in.cpu), in.blas_config, in.core_name, blas.message), warns};
}

std::string describe_cpu_gemm() {
  return fmt::format("{} | device.blas in this build: {}", ops::cpu_gemm_description(ops::CpuBlas::kAuto),
                     ops::cpu_blas_available());
}

std::string describe_runtime_env() {
  const char* env = std::getenv("CLEAVE_RUNTIME_ENV");
  if (env != nullptr && std::strcmp(env, "nothing set") != 0 && std::strcmp(env, "1") != 0) {
    return fmt::format("set by cleave: {}", env);
  }
  const char* wait = std::getenv("OMP_WAIT_POLICY");
  return fmt::format("OMP_WAIT_POLICY={}{}", wait != nullptr ? wait : "unset (libgomp's default)",
                     wait != nullptr && env != nullptr ? " (from the environment)" : "");
}

CommandRuntime::CommandRuntime(int* argc, char*** argv) : mpi_(argc, argv) {
  log::set_rank(mpi_.world_rank(), mpi_.world_size());
  comm::report_waits_on_sigterm();  // a rank the launcher ends says what it was waiting for
  if (mpi_.world_rank() == 0) {
    const auto [line, warns] = describe_cpu_runtime();
    const std::string runtime = describe_runtime_env();
    if (warns) log::warn("cpu: {} | {}", line, runtime);
    else log::info("cpu: {} | {}", line, runtime);
  }
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

run_plan::HostMemory this_host(const train::ThreadPlacement& placement) {
  const MemoryLimit limit = this_process_memory_limit();
  return {limit.bytes, limit.source, placement.ranks_on_node};
}

}  // namespace cleave::cli

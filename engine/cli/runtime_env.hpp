// The one bootstrap every `cleave` command uses for its process: the environment before main, and for the
// commands that start MPI (train, bench, profile, verify, generate) the MPI runtime, the world communicator,
// the thread and pinning policy and the end of the job after an error. A command that computes gets the
// same conditions `cleave train` runs in, so what profile and bench measure is what train does.
//
// Before main (apply_runtime_env): libgomp and OpenBLAS read their environment in library constructors,
// before main() runs, so setting a variable in main() is too late. apply_runtime_env() sets the defaults
// Cleave wants (only where the user has not set them) and re-executes the binary once; a marker variable
// stops a second re-exec. Under mpirun this happens before MPI_Init, so the launcher never sees the
// difference. What it sets:
//   OMP_WAIT_POLICY           engine/train/threads.hpp choose_omp_wait_policy: "passive" (idle OpenMP threads
//                             sleep) when the node's ranks x threads, plus the threads outside this job
//                             runnable at start (this process's own OpenBLAS workers and the node's other
//                             ranks are not load), outnumber its cores, where a spinning thread starves the
//                             one doing the work; "active" (they spin) when every thread has a core, which saves the wake-up
//                             at every parallel region (benchmarks/train/RESULTS-2026-11-28-wait-policy.md).
//   OPENBLAS_CORETYPE         kernels/cpu/blas_coretype.hpp: only when OpenBLAS chose kernels older than this
//                             CPU allows (Prescott on an AVX-512 Xeon it does not know), with the marker that
//                             lets the re-executed process check that OpenBLAS took the name.
// A variable the user has set is never changed; CLEAVE_BLAS_CORETYPE=keep turns the BLAS correction off. The
// marker CLEAVE_RUNTIME_ENV holds what was set and why, so the re-executed process can say it once in its log
// (CommandRuntime's constructor, world rank 0: the CPU, the BLAS kernels in use, the wait policy).
//
// CommandRuntime, in order: MPI_Init with the thread level comm::MpiRuntime asks for (MULTIPLE, at least
// SERIALIZED), the log's rank prefix, the SIGTERM notice of what a rank was blocked in
// (comm/mpi/wait_notice.hpp); place_threads() applies engine/train/threads.hpp's policy; world(config)
// builds the communicator parallel.comm_backend asks for with the watchdog (train.comm_timeout_s),
// train.deterministic and the progress thread per parallel.p2p_progress; run(body) ends the job once after
// an error with peers (comm::end_job_after_error: printed once, no peer left waiting).
// Invariant: at most one CommandRuntime per process (it owns MPI, as MpiRuntime does).
#pragma once

#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "engine/checkpoint/checkpoint_damage.hpp"
#include "engine/comm/make_communicator.hpp"
#include "engine/comm/mpi/mpi_runtime.hpp"
#include "engine/config/config.hpp"
#include "engine/run_plan/host_fit.hpp"
#include "engine/train/threads.hpp"

namespace cleave::cli {

void apply_runtime_env(char** argv);

// What `cleave version`, the run log and run.json say about the CPU and the kernels: "<describe_cpu> | OpenBLAS
// ... (core X): <the BLAS check's message>". The second element is true when the check warns.
std::pair<std::string, bool> describe_cpu_runtime();
// What `cleave version` says about the GEMMs: ops::cpu_gemm_description for device.blas auto (the default; a run
// logs its own device.blas: engine/train/train_loop.cpp) and the device.blas values this build accepts, e.g.
// "f32 onednn, bf16 onednn widened to f32 (device.blas auto): oneDNN 2.6.3 (isa avx512_core) | device.blas in
// this build: auto, openblas, onednn".
std::string describe_cpu_gemm();
// What apply_runtime_env set and why ("set by cleave: OMP_WAIT_POLICY=active (1 rank x 2 threads on 2
// cores, ...)"), or the wait policy found in the environment.
std::string describe_runtime_env();

// This host as the plan's host-fit check reads it (engine/run_plan/host_fit.hpp): the memory it allows this process,
// its physical memory or its cgroup's limit (engine/core/physical_memory.hpp), and the world's ranks on it, the
// launcher's local size as `placement` read it.
run_plan::HostMemory this_host(const train::ThreadPlacement& placement);

class CommandRuntime {
 public:
  CommandRuntime(int* argc, char*** argv);
  CommandRuntime(const CommandRuntime&) = delete;
  CommandRuntime& operator=(const CommandRuntime&) = delete;

  int world_rank() const { return mpi_.world_rank(); }
  int world_size() const { return mpi_.world_size(); }

  // Threads per rank and pinning (engine/train/threads.hpp). Call once, before anything computes.
  const train::ThreadPlacement& place_threads();

  // The world communicator for `config` (collective: every rank calls it with the same config).
  comm::World world(const config::RunConfig& config) const;

  // Runs `body` and returns its exit code. With peers, an exception ends the job here (printed once, then
  // a clean exit when every rank failed alike, else MPI_Abort so no peer waits on this rank); alone it
  // propagates to main, which prints it.
  template <class Body>
  int run(Body&& body) {
    try {
      return body();
    } catch (const std::exception& e) {
      if (world_size() > 1) comm::end_job_after_error(fmt::format("error: {}", e.what()), checkpoint::exit_code_of(e));
      throw;
    }
  }

 private:
  comm::MpiRuntime mpi_;
  std::optional<train::ThreadPlacement> placement_;
};

}  // namespace cleave::cli

// MPI initialization and finalization (mpi_runtime.hpp).
#include "engine/comm/mpi/mpi_runtime.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "engine/comm/launch_env.hpp"
#include "engine/comm/mpi/mpi_check.hpp"
#include "engine/comm/mpi/wait_notice.hpp"
#include "engine/core/log.hpp"

namespace cleave::comm {
namespace {

int to_mpi(MpiThreadLevel level) {
  switch (level) {
    case MpiThreadLevel::kSingle: return MPI_THREAD_SINGLE;
    case MpiThreadLevel::kFunneled: return MPI_THREAD_FUNNELED;
    case MpiThreadLevel::kSerialized: return MPI_THREAD_SERIALIZED;
    case MpiThreadLevel::kMultiple: return MPI_THREAD_MULTIPLE;
  }
  return MPI_THREAD_SINGLE;
}

MpiThreadLevel from_mpi(int level) {
  if (level >= MPI_THREAD_MULTIPLE) return MpiThreadLevel::kMultiple;
  if (level >= MPI_THREAD_SERIALIZED) return MpiThreadLevel::kSerialized;
  if (level >= MPI_THREAD_FUNNELED) return MpiThreadLevel::kFunneled;
  return MpiThreadLevel::kSingle;
}

}  // namespace

std::string_view mpi_thread_level_name(MpiThreadLevel level) {
  switch (level) {
    case MpiThreadLevel::kSingle: return "MPI_THREAD_SINGLE";
    case MpiThreadLevel::kFunneled: return "MPI_THREAD_FUNNELED";
    case MpiThreadLevel::kSerialized: return "MPI_THREAD_SERIALIZED";
    case MpiThreadLevel::kMultiple: return "MPI_THREAD_MULTIPLE";
  }
  return "?";
}

MpiRuntime::MpiRuntime(int* argc, char*** argv, MpiThreadLevel required) {
  int initialized = 0;
  CLEAVE_MPI_CHECK(MPI_Initialized(&initialized));
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    CLEAVE_MPI_CHECK(MPI_Query_thread(&provided));
  } else {
    // More than required where the library allows it: MULTIPLE is what the progress thread needs.
    CLEAVE_MPI_CHECK(MPI_Init_thread(argc, argv, to_mpi(std::max(required, MpiThreadLevel::kMultiple)), &provided));
    owns_init_ = true;
  }
  provided_ = from_mpi(provided);
  CLEAVE_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  CLEAVE_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
  log::set_rank(world_rank_, world_size_);
  // The launcher's idea of this process's place must be MPI's (launch_env.hpp): N singleton worlds from an
  // srun without PMIx would otherwise each train alone, writing the same files.
  check_world_place(world_place_from_env(process_env()), world_rank_, world_size_);
  CLEAVE_CHECK(provided_ >= required,
               "MPI provides thread level {} but Cleave needs {}: use an MPI built with thread support (Open MPI: "
               "--enable-mpi-thread-multiple, the default since 3.0; MPICH: --enable-threads=multiple)",
               mpi_thread_level_name(provided_), mpi_thread_level_name(required));
}

MpiRuntime::~MpiRuntime() {
  if (!owns_init_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

std::unique_ptr<MpiCommunicator> MpiRuntime::world(const MpiOptions& options) const {
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, options, "world");
}

void abort_job(const std::string& message, int exit_code) {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  int rank = 0;
  int size = 1;
  if (initialized && !finalized) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
  std::string line = fmt::format("[rank {}/{}] {}\n", rank, size, message);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
  withdraw_wait_notice();
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::exit(exit_code);
}

}  // namespace cleave::comm

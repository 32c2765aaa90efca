// MPI initialization and finalization (mpi_runtime.hpp).
#include "engine/comm/mpi/mpi_runtime.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>
#include <vector>
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

void end_job_after_error(const std::string& message, int exit_code, double agree_s) {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  int size = 1;
  if (initialized && !finalized) MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (!initialized || finalized || size == 1) {
    const std::string line = message + "\n";
    std::fwrite(line.data(), 1, line.size(), stderr);
    std::fflush(stderr);
    std::exit(exit_code);
  }
  withdraw_wait_notice();
  MPI_Request request = MPI_REQUEST_NULL;
  int all_failed = 0;
  if (MPI_Ibarrier(MPI_COMM_WORLD, &request) == MPI_SUCCESS) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(agree_s);
    while (!all_failed && std::chrono::steady_clock::now() < deadline) {
      if (MPI_Test(&request, &all_failed, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
      if (!all_failed) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  if (!all_failed) abort_job(message, exit_code);  // the barrier stays posted; the abort ends every rank
  // Every rank is here: rank 0 gathers the messages and prints each distinct one once.
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int length = static_cast<int>(message.size());
  std::vector<int> lengths(rank == 0 ? static_cast<std::size_t>(size) : 0);
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::vector<int> offsets(lengths.size(), 0);
  int total = 0;
  for (std::size_t r = 0; r < lengths.size(); ++r) offsets[r] = total, total += lengths[r];
  std::string all(static_cast<std::size_t>(total), '\0');
  MPI_Gatherv(message.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, 0,
              MPI_COMM_WORLD);
  if (rank == 0) {
    std::map<std::string, std::vector<int>> ranks_by_message;
    std::vector<std::string> order;
    for (int r = 0; r < size; ++r) {
      std::string text = all.substr(static_cast<std::size_t>(offsets[static_cast<std::size_t>(r)]),
                                    static_cast<std::size_t>(lengths[static_cast<std::size_t>(r)]));
      auto [it, added] = ranks_by_message.try_emplace(text);
      if (added) order.push_back(text);
      it->second.push_back(r);
    }
    std::string out;
    for (const std::string& text : order) {
      const auto& ranks = ranks_by_message[text];
      if (order.size() == 1) {
        out += text + "\n";
      } else {
        std::string which;
        for (int r : ranks) which += fmt::format("{}{}", which.empty() ? "" : ",", r);
        out += fmt::format("[rank{} {}/{}] {}\n", ranks.size() > 1 ? "s" : "", which, size, text);
      }
    }
    std::fwrite(out.data(), 1, out.size(), stderr);
    std::fflush(stderr);
  }
  MPI_Finalize();
  std::exit(exit_code);
}

}  // namespace cleave::comm

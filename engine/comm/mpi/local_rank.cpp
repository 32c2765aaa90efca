// Host-name allgather for local-rank detection (local_rank.hpp).
#include "engine/comm/mpi/local_rank.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/comm/mpi/mpi_check.hpp"

namespace cleave::comm {

std::string host_name() {
  char name[MPI_MAX_PROCESSOR_NAME];
  int length = 0;
  CLEAVE_MPI_CHECK(MPI_Get_processor_name(name, &length));
  return std::string(name, static_cast<std::size_t>(length));
}

LocalRank detect_local_rank(const MpiCommunicator& comm, const EnvLookup& env) {
  const std::optional<LocalRank> claim = local_rank_from_env(env);
  const int n = comm.size();
  std::vector<char> mine(MPI_MAX_PROCESSOR_NAME, '\0');
  const std::string host = host_name();
  std::memcpy(mine.data(), host.data(), std::min(host.size(), mine.size() - 1));
  std::vector<char> names(static_cast<std::size_t>(n) * MPI_MAX_PROCESSOR_NAME);
  const int claimed_here = claim ? claim->local_rank : -1;
  std::vector<int> claimed(static_cast<std::size_t>(n));
  comm.guarded_barrier("detect_local_rank");
  CLEAVE_MPI_CHECK(MPI_Allgather(mine.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME,
                                 MPI_CHAR, comm.native()));
  CLEAVE_MPI_CHECK(MPI_Allgather(&claimed_here, 1, MPI_INT, claimed.data(), 1, MPI_INT, comm.native()));
  std::vector<std::string> hosts;
  for (int q = 0; q < n; ++q) hosts.emplace_back(names.data() + static_cast<std::size_t>(q) * MPI_MAX_PROCESSOR_NAME);
  return resolve_local_rank(hosts, claimed, comm.rank(), claim ? claim->source : std::string("hostname"));
}

}  // namespace cleave::comm

// The MPI half of local-rank detection (launch_env.hpp): gathers every rank's host name and launcher claim
// over a communicator and resolves this rank's local rank from them.
#pragma once

#include <string>

#include "engine/comm/launch_env.hpp"
#include "engine/comm/mpi/mpi_communicator.hpp"

namespace cleave::comm {

// Collective over `comm` (a guarded barrier, then two allgathers).
LocalRank detect_local_rank(const MpiCommunicator& comm, const EnvLookup& env = process_env());

// This host's name as MPI reports it (MPI_Get_processor_name).
std::string host_name();

}  // namespace cleave::comm

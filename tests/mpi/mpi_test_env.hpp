// Shared pieces of the MPI test binaries (label `mpi`, run under mpiexec): the process's MpiRuntime, a world
// communicator factory with test-sized timeouts, and deterministic input generators.
//
// Every rank runs every test; a test must issue the same collectives in the same order on every rank. Data
// checks use EXPECT_* so a wrong value on one rank never desynchronizes the ranks; if a rank does leave a
// test early, the watchdog (kTestTimeoutS) ends the job instead of letting ctest hang.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>

#include "engine/comm/mpi/mpi_runtime.hpp"

namespace cleave::testing {

inline constexpr double kTestTimeoutS = 30.0;

// The runtime created by the test main.
comm::MpiRuntime& mpi_runtime();

// A fresh communicator over MPI_COMM_WORLD.
std::unique_ptr<comm::MpiCommunicator> make_world(bool deterministic = false,
                                                  std::int64_t max_message_elements = INT32_MAX);

// Small positive integer (1..11) for rank r, element i: exact in every dtype, and the sum over 8 ranks stays
// exact in bf16 (< 256).
inline int small_value(int rank, std::int64_t i, int salt = 0) {
  return static_cast<int>((i * 7 + rank * 3 + salt * 5) % 11) + 1;
}

}  // namespace cleave::testing

// The world communicator factory (engine/comm/make_communicator.hpp) honours parallel.comm_backend: "auto"
// and "mpi" with device.type "cpu" give an MPI world over every rank that carries a collective (checked
// against the closed-form sum); "nccl" with device.type "cpu" (or in a build without CUDA) is refused on every
// rank with the reason, keyed parallel.comm_backend, and no rank is left waiting. parallel.p2p_progress
// decides whether the MPI world runs a progress thread.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "engine/comm/make_communicator.hpp"
#include "engine/comm/mpi/progress_thread.hpp"
#include "engine/core/error.hpp"
#include "tests/mpi/mpi_test_env.hpp"

namespace cleave::testing::comm_world_test {
namespace {

comm::CommOptions test_options() { return comm::CommOptions{.timeout_s = kTestTimeoutS, .deterministic = false}; }

TEST(CommWorld, AutoAndMpiOnTheCpuGiveAnMpiWorld) {
  for (const config::CommBackend requested : {config::CommBackend::kAuto, config::CommBackend::kMpi}) {
    SCOPED_TRACE(std::string(enum_name(requested)));
    const comm::World world = comm::make_world_communicator(mpi_runtime(), requested, DeviceType::kCpu, test_options());
    ASSERT_NE(world.comm, nullptr);
    EXPECT_EQ(world.comm->backend(), "mpi");
    EXPECT_EQ(world.choice.backend, config::CommBackend::kMpi);
    EXPECT_FALSE(world.choice.reason.empty());
    const int n = world.comm->size();
    EXPECT_EQ(n, mpi_runtime().world_size());
    EXPECT_EQ(world.comm->rank(), mpi_runtime().world_rank());
    // The local rank resolved once for every placement (the test's ranks share one host, numbered in rank order).
    EXPECT_EQ(world.comm->options().local_rank, world.comm->rank());
    EXPECT_EQ(world.comm->split(0, world.comm->rank(), "copy")->options().local_rank, world.comm->rank());
    Tensor t = Tensor::empty({3}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
    for (int i = 0; i < 3; ++i) t.data<float>()[i] = static_cast<float>(small_value(world.comm->rank(), i));
    world.comm->all_reduce(t, comm::ReduceOp::kSum)->wait();
    for (int i = 0; i < 3; ++i) {
      float expected = 0;
      for (int q = 0; q < n; ++q) expected += static_cast<float>(small_value(q, i));
      EXPECT_EQ(t.data<float>()[i], expected) << "element " << i;
    }
  }
  EXPECT_NE(comm::make_world_communicator(mpi_runtime(), config::CommBackend::kAuto, DeviceType::kCpu, test_options()).choice.reason.find(
                "device.type is \"cpu\""),
            std::string::npos);
}

// parallel.p2p_progress reaches the MPI world: "auto" runs the progress thread where MPI grants
// MPI_THREAD_MULTIPLE (MpiRuntime asks for it; Open MPI grants it) and messages do not move by single copy
// (the suite runs with btl_vader_single_copy_mechanism=none, so there it runs), "off" never.
TEST(CommWorld, P2PProgressReachesTheMpiWorld) {
  const bool multiple = mpi_runtime().provided() == comm::MpiThreadLevel::kMultiple;
  const bool peers = mpi_runtime().world_size() > 1;
  const bool single_copy = comm::single_copy_transport([](const char* name) { return std::getenv(name); });
  EXPECT_EQ(comm::make_world_communicator(mpi_runtime(), config::CommBackend::kMpi, DeviceType::kCpu, test_options(), comm::P2PProgress::kAuto)
                .progress_thread,
            multiple && peers && !single_copy);
  EXPECT_FALSE(comm::make_world_communicator(mpi_runtime(), config::CommBackend::kMpi, DeviceType::kCpu, test_options(), comm::P2PProgress::kOff)
                   .progress_thread);
  if (multiple) {
    EXPECT_TRUE(comm::make_world_communicator(mpi_runtime(), config::CommBackend::kAuto, DeviceType::kCpu, test_options(), comm::P2PProgress::kThread)
                    .progress_thread);
  }
}

TEST(CommWorld, NcclOnTheCpuIsRefusedWithTheReason) {
  try {
    (void)comm::make_world_communicator(mpi_runtime(), config::CommBackend::kNccl, DeviceType::kCpu, test_options());
    ADD_FAILURE() << "nccl on device.type cpu was accepted";
  } catch (const ConfigKeyError& e) {
    EXPECT_EQ(e.key(), "parallel.comm_backend");
    const std::string message = e.what();
    const bool reason = message.find("device.type is \"cpu\"") != std::string::npos ||
                        message.find("built without them") != std::string::npos;
    EXPECT_TRUE(reason) << message;
    EXPECT_NE(message.find("use \"mpi\" or \"auto\""), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace cleave::testing::comm_world_test

// parallel.comm_backend resolution (engine/config/comm_backend.hpp): the choice for every request against
// every build / device / GPU-sharing situation, and each refusal keyed parallel.comm_backend with its reason.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/config/comm_backend.hpp"
#include "engine/core/error.hpp"

namespace cleave::config::comm_backend_test {
namespace {

// world_size 0: not known (config validation before launch); the factory passes the world's size.
CommBackendFacts facts(bool cuda_build, std::string_view device, bool gpu_per_rank = true, int world_size = 0) {
  return CommBackendFacts{cuda_build, parse_enum<DeviceType>(device, "device.type"), gpu_per_rank,
                          gpu_per_rank ? "" : "ranks 0 and 1 share GPU 0000:3b:00.0 on host node7", world_size};
}

// The choice for a request given as its config text.
CommBackendChoice choose(std::string_view requested, const CommBackendFacts& f) {
  return choose_comm_backend(parse_enum<CommBackend>(requested, "parallel.comm_backend"), f);
}

void expect_refused(std::string_view requested, const CommBackendFacts& f, const std::vector<std::string>& needles) {
  try {
    (void)choose(requested, f);
    ADD_FAILURE() << requested << " accepted";
  } catch (const ConfigKeyError& e) {
    EXPECT_EQ(e.key(), "parallel.comm_backend");
    for (const auto& needle : needles) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "lacks '" << needle << "': " << e.what();
    }
  }
}

TEST(CommBackend, AutoPicksNcclOnlyForGpusOfTheirOwn) {
  EXPECT_EQ(choose("auto", facts(false, "cpu")).backend, CommBackend::kMpi);
  EXPECT_EQ(choose("auto", facts(true, "cpu")).backend, CommBackend::kMpi);
  EXPECT_EQ(choose("auto", facts(true, "cpu")).reason, "auto: device.type is \"cpu\"");
  EXPECT_EQ(choose("auto", facts(false, "cuda")).backend, CommBackend::kMpi);
  const CommBackendChoice shared = choose("auto", facts(true, "cuda", false));
  EXPECT_EQ(shared.backend, CommBackend::kMpi);
  EXPECT_NE(shared.reason.find("ranks 0 and 1 share GPU"), std::string::npos) << shared.reason;
  EXPECT_EQ(choose("auto", facts(true, "cuda")).backend, CommBackend::kNccl);
}

// A world of one rank communicates nothing, so "auto" never makes a single-GPU run depend on NCCL starting; two
// or more ranks with GPUs of their own (and an unknown size, before launch) still get nccl. An explicit "nccl"
// is honoured for a world of one.
TEST(CommBackend, AutoUsesMpiForAWorldOfOne) {
  const CommBackendChoice one = choose("auto", facts(true, "cuda", true, 1));
  EXPECT_EQ(one.backend, CommBackend::kMpi);
  EXPECT_EQ(one.reason, "auto: a world of one rank communicates nothing");
  EXPECT_EQ(choose("auto", facts(true, "cuda", true, 2)).backend, CommBackend::kNccl);
  EXPECT_EQ(choose("auto", facts(true, "cuda", true, 8)).backend, CommBackend::kNccl);
  EXPECT_EQ(choose("auto", facts(true, "cuda", true, 0)).backend, CommBackend::kNccl);
  EXPECT_EQ(choose("auto", facts(true, "cpu", true, 1)).backend, CommBackend::kMpi);
  EXPECT_EQ(choose("auto", facts(false, "cuda", true, 1)).backend, CommBackend::kMpi);
  EXPECT_EQ(choose("auto", facts(true, "cuda", false, 2)).backend, CommBackend::kMpi);
  EXPECT_EQ(choose("nccl", facts(true, "cuda", true, 1)).backend, CommBackend::kNccl);
  EXPECT_EQ(choose("mpi", facts(true, "cuda", true, 1)).backend, CommBackend::kMpi);
}

TEST(CommBackend, MpiIsAlwaysMpi) {
  for (bool cuda : {false, true}) {
    for (const char* device : {"cpu", "cuda"}) {
      EXPECT_EQ(choose("mpi", facts(cuda, device, false)).backend, CommBackend::kMpi);
    }
  }
}

TEST(CommBackend, NcclIsRefusedWhereItCannotWork) {
  EXPECT_EQ(choose("nccl", facts(true, "cuda")).backend, CommBackend::kNccl);
  expect_refused("nccl", facts(false, "cuda"), {"needs a build with CUDA and NCCL", "\"mpi\""});
  expect_refused("nccl", facts(true, "cpu"), {"\"nccl\" carries GPU tensors", "device.type is \"cpu\"", "\"mpi\""});
  expect_refused("nccl", facts(true, "cuda", false),
                 {"needs one GPU per rank", "ranks 0 and 1 share GPU 0000:3b:00.0 on host node7", "\"mpi\""});
  expect_refused("gloo", facts(true, "cuda"), {"\"gloo\" is not one of"});
}

}  // namespace
}  // namespace cleave::config::comm_backend_test

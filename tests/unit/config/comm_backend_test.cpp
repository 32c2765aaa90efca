// parallel.comm_backend resolution (engine/config/comm_backend.hpp): the choice for every request against
// every build / device / GPU-sharing situation, and each refusal keyed parallel.comm_backend with its reason.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/config/comm_backend.hpp"
#include "engine/core/error.hpp"

namespace cleave::config {
namespace {

CommBackendFacts facts(bool cuda_build, std::string_view device, bool gpu_per_rank = true) {
  return CommBackendFacts{cuda_build, parse_enum<DeviceType>(device, "device.type"), gpu_per_rank,
                          gpu_per_rank ? "" : "ranks 0 and 1 share GPU 0000:3b:00.0 on host node7"};
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
}  // namespace cleave::config

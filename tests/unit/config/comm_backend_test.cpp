// parallel.comm_backend resolution (engine/config/comm_backend.hpp): the choice for every request against
// every build / device / GPU-sharing situation, and each refusal keyed parallel.comm_backend with its reason.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/config/comm_backend.hpp"
#include "engine/core/error.hpp"

namespace cleave::config {
namespace {

CommBackendFacts facts(bool cuda_build, std::string device, bool gpu_per_rank = true) {
  return CommBackendFacts{cuda_build, std::move(device), gpu_per_rank,
                          gpu_per_rank ? "" : "ranks 0 and 1 share GPU 0000:3b:00.0 on host node7"};
}

void expect_refused(std::string_view requested, const CommBackendFacts& f, const std::vector<std::string>& needles) {
  try {
    (void)choose_comm_backend(requested, f);
    ADD_FAILURE() << requested << " accepted";
  } catch (const ConfigKeyError& e) {
    EXPECT_EQ(e.key(), "parallel.comm_backend");
    for (const auto& needle : needles) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "lacks '" << needle << "': " << e.what();
    }
  }
}

TEST(CommBackend, AutoPicksNcclOnlyForGpusOfTheirOwn) {
  EXPECT_EQ(choose_comm_backend("auto", facts(false, "cpu")).backend, "mpi");
  EXPECT_EQ(choose_comm_backend("auto", facts(true, "cpu")).backend, "mpi");
  EXPECT_EQ(choose_comm_backend("auto", facts(true, "cpu")).reason, "auto: device.type is \"cpu\"");
  EXPECT_EQ(choose_comm_backend("auto", facts(false, "cuda")).backend, "mpi");
  const CommBackendChoice shared = choose_comm_backend("auto", facts(true, "cuda", false));
  EXPECT_EQ(shared.backend, "mpi");
  EXPECT_NE(shared.reason.find("ranks 0 and 1 share GPU"), std::string::npos) << shared.reason;
  EXPECT_EQ(choose_comm_backend("auto", facts(true, "cuda")).backend, "nccl");
}

TEST(CommBackend, MpiIsAlwaysMpi) {
  for (bool cuda : {false, true}) {
    for (const char* device : {"cpu", "cuda"}) {
      EXPECT_EQ(choose_comm_backend("mpi", facts(cuda, device, false)).backend, "mpi");
    }
  }
}

TEST(CommBackend, NcclIsRefusedWhereItCannotWork) {
  EXPECT_EQ(choose_comm_backend("nccl", facts(true, "cuda")).backend, "nccl");
  expect_refused("nccl", facts(false, "cuda"), {"needs a build with CUDA and NCCL", "\"mpi\""});
  expect_refused("nccl", facts(true, "cpu"), {"\"nccl\" carries GPU tensors", "device.type is \"cpu\"", "\"mpi\""});
  expect_refused("nccl", facts(true, "cuda", false),
                 {"needs one GPU per rank", "ranks 0 and 1 share GPU 0000:3b:00.0 on host node7", "\"mpi\""});
  expect_refused("gloo", facts(true, "cuda"), {"\"gloo\" is not one of"});
}

}  // namespace
}  // namespace cleave::config

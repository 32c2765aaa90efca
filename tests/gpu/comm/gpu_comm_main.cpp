// gtest main for the NCCL tests: initializes MPI (a singleton world of 1 when run directly, as ctest does for
// each discovered test; any size under mpiexec) and prints failures of non-zero ranks with their rank.
// Listing tests (--gtest_list_tests, used by test discovery at build time) does not touch MPI or CUDA.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "engine/comm/mpi/mpi_runtime.hpp"
#include "tests/gpu/comm/gpu_comm_env.hpp"

namespace cleave::testing {
namespace {
comm::MpiRuntime* g_runtime = nullptr;

class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestStart(const ::testing::TestInfo& info) override {
    test_ = std::string(info.test_suite_name()) + "." + info.name();
  }
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s failed at %s:%d\n%s\n", rank_, test_.c_str(),
                 result.file_name() ? result.file_name() : "?", result.line_number(), result.summary());
  }

 private:
  int rank_;
  std::string test_;
};
}  // namespace

comm::MpiRuntime& gpu_mpi_runtime() { return *g_runtime; }

}  // namespace cleave::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (::testing::GTEST_FLAG(list_tests)) return RUN_ALL_TESTS();
  int failed = 0;
  {
    cleave::comm::MpiRuntime runtime(&argc, &argv);
    cleave::testing::g_runtime = &runtime;
    if (runtime.world_rank() != 0) {
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new cleave::testing::FailurePrinter(runtime.world_rank()));
    }
    const int here = RUN_ALL_TESTS() != 0 ? 1 : 0;
    MPI_Allreduce(&here, &failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    cleave::testing::g_runtime = nullptr;
  }
  return failed > 0 ? 1 : 0;
}

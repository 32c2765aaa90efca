// gtest main for the MPI test binaries: initializes MPI, lets rank 0 print the usual report and other ranks
// print only their failures (prefixed with their rank), and combines every rank's result into the exit code.
// First, before MPI starts, the start-up BLAS check (kernels/cpu/blas_coretype.hpp) may re-execute the binary.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>

#include "kernels/cpu/blas_coretype.hpp"
#include "tests/mpi/mpi_test_env.hpp"

namespace cleave::testing {
namespace {

comm::MpiRuntime* g_runtime = nullptr;

// Prints failed assertions of a non-zero rank, each tagged with the rank and test.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank, int size) : rank_(rank), size_(size) {}
  // (UnitTest::current_test_info() would deadlock inside OnTestPartResult: gtest holds its mutex there.)
  void OnTestStart(const ::testing::TestInfo& info) override {
    test_ = std::string(info.test_suite_name()) + "." + info.name();
  }
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d/%d] %s failed at %s:%d\n%s\n", rank_, size_, test_.c_str(),
                 result.file_name() ? result.file_name() : "?", result.line_number(), result.summary());
    std::fflush(stderr);
  }

 private:
  int rank_;
  int size_;
  std::string test_;
};

}  // namespace

comm::MpiRuntime& mpi_runtime() { return *g_runtime; }

std::unique_ptr<comm::MpiCommunicator> make_world(bool deterministic, std::int64_t max_message_elements) {
  comm::MpiOptions options;
  options.timeout_s = kTestTimeoutS;
  options.deterministic = deterministic;
  options.max_message_elements = max_message_elements;
  return std::make_unique<comm::MpiCommunicator>(MPI_COMM_WORLD, options, deterministic ? "world-det" : "world");
}

}  // namespace cleave::testing

int main(int argc, char** argv) {
  cleave::kernels::cpu::reexec_with_blas_coretype(argv);  // before MPI_Init: the kernels `cleave` runs
  ::testing::InitGoogleTest(&argc, argv);
  int failed_anywhere = 0;
  {
    cleave::comm::MpiRuntime runtime(&argc, &argv);
    cleave::testing::g_runtime = &runtime;
    const int rank = runtime.world_rank();
    if (rank != 0) {
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new cleave::testing::FailurePrinter(rank, runtime.world_size()));
    }
    const int failed_here = RUN_ALL_TESTS() != 0 ? 1 : 0;
    int failed_ranks = 0;
    MPI_Allreduce(&failed_here, &failed_ranks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && failed_ranks > 0) {
      std::fprintf(stderr, "mpi tests: failures on %d of %d ranks\n", failed_ranks, runtime.world_size());
    }
    failed_anywhere = failed_ranks;
    cleave::testing::g_runtime = nullptr;
  }
  return failed_anywhere > 0 ? 1 : 0;
}

// BLAS runtime knobs: the thread count round-trips, a bad count is a user error, and OpenBLAS describes
// its build and the core it selected.
#include "kernels/cpu/blas_runtime.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include "engine/core/error.hpp"

namespace cleave::kernels::cpu::blas_runtime_test {
namespace {

TEST(KernelBlasRuntime, ThreadsRoundTrip) {
  const int saved = blas_threads();
  configure_blas_threads(1);
  EXPECT_EQ(blas_threads(), 1);
  configure_blas_threads(saved);
  EXPECT_EQ(blas_threads(), saved);
  EXPECT_THROW(configure_blas_threads(0), Error);
}

TEST(KernelBlasRuntime, KernelThreadsUseOneOpenBlasThreadAndAnOpenMpTeam) {
  const int saved_blas = blas_threads();
  const int saved_omp = omp_get_max_threads();
  configure_kernel_threads(1);
  EXPECT_EQ(blas_threads(), 1);
  EXPECT_EQ(omp_get_max_threads(), 1);
  configure_kernel_threads(2);
  EXPECT_EQ(blas_threads(), 1);  // GEMMs are sliced over OpenMP instead
  EXPECT_EQ(omp_get_max_threads(), 2);
  EXPECT_THROW(configure_kernel_threads(-1), Error);
  configure_blas_threads(saved_blas);
  omp_set_num_threads(saved_omp);
}

TEST(KernelBlasRuntime, DescribesItself) {
  EXPECT_NE(blas_config().find("OpenBLAS"), std::string::npos) << blas_config();
  EXPECT_FALSE(blas_core_name().empty());
  EXPECT_NE(blas_core_name(), "unknown");
}

}  // namespace
}  // namespace cleave::kernels::cpu::blas_runtime_test

// OpenBLAS runtime knobs. OPENBLAS_CORETYPE is deliberately not set here: OpenBLAS reads it in its load-time
// constructor, before main() runs, so a setenv() from the library has no effect (measured by
// benchmarks/kernels/gemm_bench.cpp --probe_coretype); a launcher must export it instead.
#include "kernels/cpu/blas_runtime.hpp"

#include <cblas.h>

#include <omp.h>

#include "engine/core/error.hpp"

namespace cleave::kernels::cpu {

void configure_blas_threads(int threads) {
  CLEAVE_CHECK(threads >= 1, "configure_blas_threads: thread count must be >= 1, got {}", threads);
  openblas_set_num_threads(threads);
}

int blas_threads() { return openblas_get_num_threads(); }

void configure_kernel_threads(int threads) {
  CLEAVE_CHECK(threads >= 1, "configure_kernel_threads: thread count must be >= 1, got {}", threads);
  openblas_set_num_threads(1);
  omp_set_num_threads(threads);
}

int kernel_threads() { return omp_get_max_threads(); }

std::string blas_config() {
  const char* config = openblas_get_config();
  return config != nullptr ? std::string(config) : std::string("unknown");
}

std::string blas_core_name() {
  const char* name = openblas_get_corename();
  return name != nullptr ? std::string(name) : std::string("unknown");
}

}  // namespace cleave::kernels::cpu

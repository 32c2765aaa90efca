// Process-wide BLAS runtime settings (OpenBLAS thread count and a description of the loaded core).
//
// Invariant: these are the only functions in Cleave that touch OpenBLAS's global state; call them from
// the main thread before or between kernels, never concurrently with a running GEMM.
#pragma once

#include <string>

namespace cleave::kernels::cpu {

// Threads OpenBLAS may use for one GEMM (>= 1). Does not change OpenMP's thread count.
void configure_blas_threads(int threads);

// Threads OpenBLAS currently uses.
int blas_threads();

// OpenBLAS's self-description, e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64",
// and the core type it selected ("Haswell", "Zen", "SkylakeX", ...).
std::string blas_config();
std::string blas_core_name();

}  // namespace cleave::kernels::cpu

// Process-wide threading settings of the CPU kernels (OpenBLAS's thread pool, OpenMP's team size) and a
// description of the loaded BLAS core.
//
// Invariant: these are the only functions in Cleave that touch OpenBLAS's global state; call them from
// the main thread before or between kernels, never concurrently with a running GEMM.
//
// Threads must not oversubscribe the cores: with R ranks on a machine of N cores give each rank N/R
// threads. Measured on 2 cores with other work running, 2-thread OpenMP loops were 10x slower than
// 1 thread (spinning barriers wait for a descheduled sibling).
//
// OPENBLAS_CORETYPE (forcing a kernel family) cannot be set from here: OpenBLAS reads it in its
// load-time constructor, before main() runs. blas_coretype.hpp decides it at start and `cleave` exports it
// and re-executes itself (engine/cli/runtime_env.cpp).
#pragma once

#include <string>

namespace cleave::kernels::cpu {

// Threads OpenBLAS may use for one GEMM (>= 1), threading GEMMs inside OpenBLAS's own pthread pool. Does
// not change OpenMP's thread count. Prefer configure_kernel_threads (the two pools thrash when GEMMs
// alternate with OpenMP kernels); this is the raw knob, used by the benchmark to compare the two.
void configure_blas_threads(int threads);

// Threads OpenBLAS currently uses.
int blas_threads();

// The recommended setting: every CPU kernel, GEMM included, runs on `threads` OpenMP threads (parallel
// regions started from the calling thread, omp_set_num_threads) and OpenBLAS is set to one thread; a
// large GEMM is then sliced over the OpenMP team (gemm.cpp), so only one thread pool is ever active.
// Call it once at startup, before the first kernel. threads >= 1.
void configure_kernel_threads(int threads);
// OpenMP threads the CPU kernels use now.
int kernel_threads();

// Deterministic GEMM slicing is a per-call argument (gemm.hpp, GemmSlicing), not process state.

// OpenBLAS's self-description, e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64",
// and the core type it selected ("Haswell", "Zen", "SkylakeX", ...).
std::string blas_config();
std::string blas_core_name();

}  // namespace cleave::kernels::cpu

// The GEMM libraries the CPU kernels can call, side by side: OpenBLAS (always built), BLIS and oneDNN's matmul
// (each optional: built when CMake found it, CLEAVE_WITH_BLIS / CLEAVE_WITH_ONEDNN in cleave/config.hpp).
//
// Invariant: every library is called single-threaded on one slice of C (gemm.cpp cuts the slices and spreads
// them over the OpenMP team), so the determinism contract of GemmSlicing::kShapeFixed holds for each library
// by construction: the same slices, each computed by the same single-threaded call, whatever the thread count.
// Only oneDNN has kernels for bf16 operands (f32 accumulation); the others take bf16 widened to f32.
//
// Adding a library: a value here, its name in gemm_backend_name, a gemm_<name>.cpp with the single-threaded
// kernels of gemm_kernels.hpp (compiled to a "not built" error when CMake did not find it), a probe in
// cmake/CleaveDependencies.cmake, and its name in kernels/ops/cpu_blas.hpp (device.blas).
#pragma once

#include <string>

namespace cleave::kernels::cpu {

enum class GemmBackend { kOpenBlas, kBlis, kOneDnn };

// Whether a GEMM's m and k are a layer's fixed sizes (kExact) or change from call to call (kVarying: a grouped
// GEMM's groups, whose row count is the number of tokens routed to each expert and changes every step). oneDNN
// makes one primitive per exact shape for kExact, and one with m and k given at run time (DNNL_RUNTIME_DIM_VAL)
// per remaining shape for kVarying, so routing never makes a primitive (onednn_matmuls.hpp); OpenBLAS and BLIS
// ignore it. Part of the problem: a GEMM's bits depend on its shape and this, never on which calls came before.
enum class GemmShape { kExact, kVarying };

// "openblas", "blis", "onednn" (the device.blas names).
const char* gemm_backend_name(GemmBackend backend);
// Whether this build links the library.
bool gemm_backend_built(GemmBackend backend);
// Whether the library has bf16-operand kernels (only oneDNN). Says nothing about the CPU: see
// onednn_bf16_instructions.
bool gemm_backend_has_bf16(GemmBackend backend);
// oneDNN's own answer to "which instruction set will you use" includes bf16 dot products (avx512_core_bf16 or
// AMX): its bf16 matmul then runs on hardware bf16 instructions rather than emulation. False when oneDNN is not
// built.
bool onednn_bf16_instructions();
// Whether oneDNN has a bf16 matmul on this CPU at all (its bf16 needs AVX-512; with AVX2 only it refuses bf16,
// and gemm_bf16 throws saying so). Implied by onednn_bf16_instructions. False when oneDNN is not built.
bool onednn_bf16_supported();
// One line for logs and benchmark records: library, version, and what it picked on this CPU, e.g.
// "oneDNN 2.6.3 (isa avx512_core_bf16)" or "BLIS 0.9.0 (zen3)"; "not built" when absent.
std::string gemm_backend_description(GemmBackend backend);

}  // namespace cleave::kernels::cpu

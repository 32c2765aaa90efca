// The vector instruction sets the CPU kernels with several compiled paths (gelu.cpp, swiglu.cpp, cast.cpp,
// rmsnorm.cpp, rope.cpp) choose from at run time: baseline (the build's own vectors), AVX2 (8 lanes), AVX-512
// (16 lanes); and the one dispatch they share, isa_path.
//
// Invariant: a path is only ever run where the CPU and OS support it; every kernel's paths give the same bits,
// so the choice never changes a result (each kernel's EveryIsaPathGivesTheSameBits test).
//
// A kernel file defines its paths as `name_baseline`, `name_avx2` and `name_avx512` (the last two on x86-64
// only) with one signature, and calls the chosen one as
//   isa_path(isa, "op_name", CLEAVE_ISA_PATHS(name))(arguments...);
#pragma once

namespace cleave::kernels::cpu {

enum class VectorIsa { kBaseline, kAvx2, kAvx512 };

// The widest path this CPU supports.
VectorIsa best_vector_isa();
bool vector_isa_available(VectorIsa isa);

// AVX-512 BF16 (vdpbf16ps, bf16 pair dot products into f32), which a kernel with a bf16 dot-product path takes on
// top of its AVX-512 path (flash_attention_dots.hpp); false off x86-64.
bool avx512_bf16_available();

// An internal error naming op when this CPU lacks isa (a test or benchmark asked for a path it cannot run).
void check_vector_isa(VectorIsa isa, const char* op);

// The path for isa among a kernel's compiled paths (all of one function type Fn), after check_vector_isa.
template <class Fn>
Fn* isa_path(VectorIsa isa, const char* op, Fn* baseline, Fn* avx2, Fn* avx512) {
  check_vector_isa(isa, op);
  switch (isa) {
    case VectorIsa::kAvx512: return avx512;
    case VectorIsa::kAvx2: return avx2;
    case VectorIsa::kBaseline: break;
  }
  return baseline;
}

}  // namespace cleave::kernels::cpu

// A kernel's three paths as isa_path's arguments. Off x86-64 only the baseline exists (and only it is available).
#if defined(__x86_64__)
#define CLEAVE_ISA_PATHS(name) name##_baseline, name##_avx2, name##_avx512
#else
#define CLEAVE_ISA_PATHS(name) name##_baseline, name##_baseline, name##_baseline
#endif

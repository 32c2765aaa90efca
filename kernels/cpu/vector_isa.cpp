// The run-time choice of vector path (see vector_isa.hpp), from the CPU's own feature bits.
#include "kernels/cpu/vector_isa.hpp"

#include "engine/core/error.hpp"

namespace cleave::kernels::cpu {

bool vector_isa_available(VectorIsa isa) {
#if defined(__x86_64__)
  switch (isa) {
    case VectorIsa::kBaseline: return true;
    case VectorIsa::kAvx2: return __builtin_cpu_supports("avx2");
    case VectorIsa::kAvx512: return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  }
  return false;
#else
  return isa == VectorIsa::kBaseline;
#endif
}

bool avx512_bf16_available() {
#if defined(__x86_64__)
  return vector_isa_available(VectorIsa::kAvx512) && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

void check_vector_isa(VectorIsa isa, const char* op) {
  CLEAVE_ASSERT(vector_isa_available(isa), "{}: instruction set {} is not available on this CPU", op,
                static_cast<int>(isa));
}

VectorIsa best_vector_isa() {
  if (vector_isa_available(VectorIsa::kAvx512)) return VectorIsa::kAvx512;
  if (vector_isa_available(VectorIsa::kAvx2)) return VectorIsa::kAvx2;
  return VectorIsa::kBaseline;
}

}  // namespace cleave::kernels::cpu

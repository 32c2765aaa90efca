// The vector instruction sets the CPU kernels with several compiled paths (gelu.cpp, cast.cpp) choose from at
// run time: baseline (the build's own vectors), AVX2 (8 lanes), AVX-512 (16 lanes).
//
// Invariant: a path is only ever run where the CPU and OS support it; every kernel's paths give the same bits,
// so the choice never changes a result (each kernel's EveryIsaPathGivesTheSameBits test).
#pragma once

namespace cleave::kernels::cpu {

enum class VectorIsa { kBaseline, kAvx2, kAvx512 };

// The widest path this CPU supports.
VectorIsa best_vector_isa();
bool vector_isa_available(VectorIsa isa);

}  // namespace cleave::kernels::cpu

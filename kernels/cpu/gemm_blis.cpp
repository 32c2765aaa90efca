// BLIS's single-threaded sgemm (gemm_kernels.hpp) through its typed native API, bli_sgemm_ex, with a runtime
// object asking for one thread: the caller (gemm.cpp) spreads slices over the OpenMP team. BLIS's libblis also
// exports cblas_sgemm; this file never includes its cblas.h, and CMake links BLIS after OpenBLAS, so the cblas
// symbols the rest of Cleave calls stay OpenBLAS's.
#include "cleave/config.hpp"
#include "engine/core/error.hpp"
#include "kernels/cpu/gemm_backend.hpp"
#include "kernels/cpu/gemm_kernels.hpp"

#if CLEAVE_WITH_BLIS
#include <blis.h>
#endif

namespace cleave::kernels::cpu::gemm_detail {

#if CLEAVE_WITH_BLIS
void sgemm_blis(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                std::int64_t ldc) {
  rntm_t rntm = BLIS_RNTM_INITIALIZER;
  bli_rntm_set_num_threads(1, &rntm);
  // Row-major storage: row stride = leading dimension, column stride 1; BLIS transposes the stored matrix.
  bli_sgemm_ex(trans_a ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, trans_b ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, m, n, k,
               &alpha, const_cast<float*>(a), lda, 1, const_cast<float*>(b), ldb, 1, &beta, c, ldc, 1, nullptr,
               &rntm);
}
#else
void sgemm_blis(bool, bool, std::int64_t, std::int64_t, std::int64_t, float, const float*, std::int64_t,
                const float*, std::int64_t, float, float*, std::int64_t) {
  CLEAVE_THROW("gemm: the blis library is not built into this cleave (CMake found no BLIS; apt package "
               "libblis-dev, scripts/install-deps.sh)");
}
#endif

}  // namespace cleave::kernels::cpu::gemm_detail

namespace cleave::kernels::cpu {

std::string blis_description() {
#if CLEAVE_WITH_BLIS
  return std::string("BLIS ") + bli_info_get_version_str() + " (" + bli_arch_string(bli_arch_query_id()) + ")";
#else
  return "not built";
#endif
}

}  // namespace cleave::kernels::cpu

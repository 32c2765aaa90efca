// Names and build facts of the GEMM libraries (gemm_backend.hpp). The library-specific descriptions live with
// each library's kernels (gemm_blis.cpp, gemm_onednn.cpp).
#include "kernels/cpu/gemm_backend.hpp"

#include "cleave/config.hpp"
#include "engine/core/error.hpp"
#include "kernels/cpu/blas_runtime.hpp"

namespace cleave::kernels::cpu {

std::string blis_description();    // gemm_blis.cpp
std::string onednn_description();  // gemm_onednn.cpp

const char* gemm_backend_name(GemmBackend backend) {
  switch (backend) {
    case GemmBackend::kOpenBlas: return "openblas";
    case GemmBackend::kBlis: return "blis";
    case GemmBackend::kOneDnn: return "onednn";
  }
  CLEAVE_ASSERT(false, "unknown GemmBackend {}", static_cast<int>(backend));
}

bool gemm_backend_built(GemmBackend backend) {
  switch (backend) {
    case GemmBackend::kOpenBlas: return true;
    case GemmBackend::kBlis: return CLEAVE_WITH_BLIS != 0;
    case GemmBackend::kOneDnn: return CLEAVE_WITH_ONEDNN != 0;
  }
  return false;
}

bool gemm_backend_has_bf16(GemmBackend backend) { return backend == GemmBackend::kOneDnn; }

std::string gemm_backend_description(GemmBackend backend) {
  switch (backend) {
    case GemmBackend::kOpenBlas: return blas_config() + " (core " + blas_core_name() + ")";
    case GemmBackend::kBlis: return blis_description();
    case GemmBackend::kOneDnn: return onednn_description();
  }
  return "unknown";
}

}  // namespace cleave::kernels::cpu

// cuBLASLt opened with dlopen on first use (cublaslt_library.hpp has why and the invariant).
#include "engine/cuda/cublaslt_library.hpp"

#include <dlfcn.h>
#include <fmt/ranges.h>

#include <string>
#include <vector>

#include "engine/core/error.hpp"

#ifndef CLEAVE_CUBLASLT_DIR
#define CLEAVE_CUBLASLT_DIR ""
#endif

namespace cleave::cuda {
namespace {

#define CLEAVE_CUBLASLT_TEXT_INNER(x) #x
#define CLEAVE_CUBLASLT_TEXT(x) CLEAVE_CUBLASLT_TEXT_INNER(x)
constexpr const char* kSoname = "libcublasLt.so." CLEAVE_CUBLASLT_TEXT(CUBLAS_VER_MAJOR);
#undef CLEAVE_CUBLASLT_TEXT
#undef CLEAVE_CUBLASLT_TEXT_INNER

// The loader's reason for the last failure (never null).
std::string loader_error() {
  const char* reason = ::dlerror();
  return reason != nullptr ? reason : "no reason given";
}

// The soname first (the loader's search), then the same file in the toolkit folder CMake found, if known.
void* open_library() {
  std::vector<std::string> candidates = {kSoname};
  if (!std::string(CLEAVE_CUBLASLT_DIR).empty()) candidates.push_back(std::string(CLEAVE_CUBLASLT_DIR) + "/" + kSoname);
  std::vector<std::string> reasons;
  for (const std::string& path : candidates) {
    if (void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
    reasons.push_back(fmt::format("{} ({})", path, loader_error()));
  }
  throw BackendError(fmt::format("cuBLASLt: cannot open {}; add the CUDA toolkit's lib folder to LD_LIBRARY_PATH",
                                 fmt::join(reasons, " nor ")));
}

template <typename Function>
void resolve(void* handle, const char* name, Function& out) {
  void* symbol = ::dlsym(handle, name);
  if (symbol == nullptr) {
    throw BackendError(
        fmt::format("cuBLASLt: {} has no function {} ({}); the CUDA toolkit at run time is older "
                    "than the headers it was built with (cuBLASLt {})",
                    kSoname, name, loader_error(), CUBLAS_VERSION));
  }
  out = reinterpret_cast<Function>(symbol);
}

CublasLt load() {
  void* handle = open_library();  // kept open for the life of the process
  CublasLt lt{};
  resolve(handle, "cublasLtCreate", lt.create);
  resolve(handle, "cublasLtDestroy", lt.destroy);
  resolve(handle, "cublasLtGetVersion", lt.get_version);
  resolve(handle, "cublasLtGetStatusString", lt.get_status_string);
  resolve(handle, "cublasLtMatmul", lt.matmul);
  resolve(handle, "cublasLtMatmulAlgoCheck", lt.matmul_algo_check);
  resolve(handle, "cublasLtMatmulAlgoGetHeuristic", lt.matmul_algo_get_heuristic);
  resolve(handle, "cublasLtMatmulDescCreate", lt.matmul_desc_create);
  resolve(handle, "cublasLtMatmulDescDestroy", lt.matmul_desc_destroy);
  resolve(handle, "cublasLtMatmulDescSetAttribute", lt.matmul_desc_set_attribute);
  resolve(handle, "cublasLtMatmulPreferenceCreate", lt.matmul_preference_create);
  resolve(handle, "cublasLtMatmulPreferenceDestroy", lt.matmul_preference_destroy);
  resolve(handle, "cublasLtMatmulPreferenceSetAttribute", lt.matmul_preference_set_attribute);
  resolve(handle, "cublasLtMatrixLayoutCreate", lt.matrix_layout_create);
  resolve(handle, "cublasLtMatrixLayoutDestroy", lt.matrix_layout_destroy);
  resolve(handle, "cublasLtMatrixLayoutSetAttribute", lt.matrix_layout_set_attribute);
  return lt;
}

}  // namespace

const CublasLt& cublaslt() {
  static const CublasLt library = load();
  return library;
}

const char* cublaslt_soname() { return kSoname; }

}  // namespace cleave::cuda

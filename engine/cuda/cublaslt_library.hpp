// cuBLASLt, opened on first use (dlopen) instead of linked. Loading libcublasLt runs its start-up work in every
// process that links it, GPU or not: about 100 MB of page faults, 0.1 s of CPU, measured on a 2-core Xeon
// (docs/building.md). A CPU run, every `cleave` command and every test process paid it without calling cuBLASLt;
// now only the first GemmContext (or the CUDA device's description, library_versions()) does.
//
// The invariant: every cuBLASLt call of the tree goes through cublaslt() (tests/scripts/cuda_call_lint.sh fails a
// direct call), and each member has the exact type of the function it stands for (decltype of its declaration in
// cublasLt.h), so a call compiles only with the arguments the header declares.
#pragma once

#include <cublasLt.h>

namespace cleave::cuda {

struct CublasLt {
  decltype(&::cublasLtCreate) create;
  decltype(&::cublasLtDestroy) destroy;
  decltype(&::cublasLtGetVersion) get_version;
  decltype(&::cublasLtGetStatusString) get_status_string;
  decltype(&::cublasLtMatmul) matmul;
  decltype(&::cublasLtMatmulAlgoCheck) matmul_algo_check;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) matmul_algo_get_heuristic;
  decltype(&::cublasLtMatmulDescCreate) matmul_desc_create;
  decltype(&::cublasLtMatmulDescDestroy) matmul_desc_destroy;
  decltype(&::cublasLtMatmulDescSetAttribute) matmul_desc_set_attribute;
  decltype(&::cublasLtMatmulPreferenceCreate) matmul_preference_create;
  decltype(&::cublasLtMatmulPreferenceDestroy) matmul_preference_destroy;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) matmul_preference_set_attribute;
  decltype(&::cublasLtMatrixLayoutCreate) matrix_layout_create;
  decltype(&::cublasLtMatrixLayoutDestroy) matrix_layout_destroy;
  decltype(&::cublasLtMatrixLayoutSetAttribute) matrix_layout_set_attribute;
};

// The library, opened once per process (thread-safe) and kept open: first the name the loader searches
// (libcublasLt.so.<major of the headers built against>: LD_LIBRARY_PATH, the binary's run path, ld.so.cache), then
// the same name in the toolkit folder CMake found at build time. Throws cleave::BackendError naming both paths and
// the loader's reason when neither opens or a function is missing.
const CublasLt& cublaslt();

// The file name tried first, "libcublasLt.so.13" for CUDA 13's headers.
const char* cublaslt_soname();

}  // namespace cleave::cuda

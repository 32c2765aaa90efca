// engine/cuda/cublaslt_library.hpp on the CPU: cuBLASLt opens on first use (dlopen, no GPU needed for these calls)
// and every function the GEMM calls resolves; the version is the major the headers were built against, and the
// status text is the library's own. That the binaries no longer link it (no start-up cost) is checked on the ELF
// files by tests/scripts/cublaslt_not_linked.sh.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <string>

#include "engine/cuda/cublaslt_library.hpp"

namespace cleave::testing::cublaslt_library_test {
namespace {

TEST(CublasLtLibrary, OpensOnFirstUseWithEveryFunctionTheGemmCalls) {
  const cuda::CublasLt& lt = cuda::cublaslt();
  EXPECT_NE(lt.create, nullptr);
  EXPECT_NE(lt.destroy, nullptr);
  EXPECT_NE(lt.get_version, nullptr);
  EXPECT_NE(lt.get_status_string, nullptr);
  EXPECT_NE(lt.matmul, nullptr);
  EXPECT_NE(lt.matmul_algo_check, nullptr);
  EXPECT_NE(lt.matmul_algo_get_heuristic, nullptr);
  EXPECT_NE(lt.matmul_desc_create, nullptr);
  EXPECT_NE(lt.matmul_desc_destroy, nullptr);
  EXPECT_NE(lt.matmul_desc_set_attribute, nullptr);
  EXPECT_NE(lt.matmul_preference_create, nullptr);
  EXPECT_NE(lt.matmul_preference_destroy, nullptr);
  EXPECT_NE(lt.matmul_preference_set_attribute, nullptr);
  EXPECT_NE(lt.matrix_layout_create, nullptr);
  EXPECT_NE(lt.matrix_layout_destroy, nullptr);
  EXPECT_NE(lt.matrix_layout_set_attribute, nullptr);
  // The same object every time: opened once per process.
  EXPECT_EQ(&cuda::cublaslt(), &lt);
  // The library is now loaded under the name the loader tried (RTLD_NOLOAD opens nothing new).
  void* loaded = ::dlopen(cuda::cublaslt_soname(), RTLD_NOW | RTLD_NOLOAD);
  EXPECT_NE(loaded, nullptr) << cuda::cublaslt_soname();
  if (loaded != nullptr) ::dlclose(loaded);
}

TEST(CublasLtLibrary, VersionAndStatusTextComeFromTheLibraryBuiltAgainst) {
  const cuda::CublasLt& lt = cuda::cublaslt();
  EXPECT_EQ(lt.get_version() / 10000, static_cast<std::size_t>(CUBLAS_VER_MAJOR));
  EXPECT_EQ(std::string(cuda::cublaslt_soname()), "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR));
  // cuBLASLt 13's own words (a lower-case description, not the enum's name).
  EXPECT_EQ(std::string(lt.get_status_string(CUBLAS_STATUS_SUCCESS)), "success");
  EXPECT_NE(std::string(lt.get_status_string(CUBLAS_STATUS_NOT_SUPPORTED)).find("not supported"), std::string::npos)
      << lt.get_status_string(CUBLAS_STATUS_NOT_SUPPORTED);
}

}  // namespace
}  // namespace cleave::testing::cublaslt_library_test

// Test double for OpenBLAS's openblas_get_corename (LD_PRELOADed by blas_coretype_reexec.sh): "Prescott", the
// generic kernels a DYNAMIC_ARCH OpenBLAS picks for a CPU it does not know, while OPENBLAS_CORETYPE is unset;
// the library's real answer once it is set. It makes any machine look like the one of issue 39, so the
// re-execution path of the start-up BLAS check runs for real.
#include <dlfcn.h>

#include <cstdlib>

extern "C" char* openblas_get_corename(void) {
  static char prescott[] = "Prescott";
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr) return prescott;
  using Fn = char* (*)(void);
  const auto real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "openblas_get_corename"));
  return real != nullptr ? real() : prescott;
}

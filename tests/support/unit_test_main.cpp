// gtest main of the unit test binaries: first corrects OpenBLAS's kernel choice where it is older than the
// CPU allows (kernels/cpu/blas_coretype.hpp; re-executes once), so the suite runs the kernels `cleave` runs.
#include <gtest/gtest.h>

#include "kernels/cpu/blas_coretype.hpp"

int main(int argc, char** argv) {
  cleave::kernels::cpu::reexec_with_blas_coretype(argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

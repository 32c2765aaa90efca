// See runtime_env.hpp.
#include "engine/cli/runtime_env.hpp"

#include <unistd.h>

#include <cstdlib>

namespace cleave::cli {

void apply_runtime_env(char** argv) {
  if (std::getenv("CLEAVE_RUNTIME_ENV") != nullptr) return;
  bool changed = false;
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    setenv("OMP_WAIT_POLICY", "passive", 0);
    changed = true;
  }
  setenv("CLEAVE_RUNTIME_ENV", "1", 1);
  if (!changed) return;
  execv("/proc/self/exe", argv);
  // exec failed (no /proc): carry on with the library defaults; correctness does not depend on them.
}

}  // namespace cleave::cli

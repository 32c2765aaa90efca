// Process-level runtime settings that libraries read once at load time, applied before they load.
//
// libgomp and OpenBLAS read their environment in library constructors, before main() runs, so setting a
// variable in main() is too late. apply_runtime_env() sets the defaults Cleave wants (only where the user
// has not set them) and re-executes the binary once; a marker variable stops a second re-exec. Under
// mpirun this happens before MPI_Init, so the launcher never sees the difference.
//
// Defaults:
//   OMP_WAIT_POLICY=passive   idle OpenMP threads sleep instead of spinning: on 2 shared cores spinning
//                             threads starve the thread doing the work (measured: tiny GPT step 350 ms
//                             spinning vs 10 ms passive while other processes were busy).
#pragma once

namespace cleave::cli {

void apply_runtime_env(char** argv);

}  // namespace cleave::cli

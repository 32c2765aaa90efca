// Which OpenBLAS kernel family ("core type") this process should run, decided from the CPU's features and the
// library's own choice: never a silent generic kernel (issue 39).
//
// Why: a DYNAMIC_ARCH OpenBLAS picks its kernels by CPU model number once, at load. A CPU newer than the
// library's table falls back to old kernels: Debian 12's OpenBLAS 0.3.21 runs Prescott (SSE3) kernels on
// Intel family 6 model 207 (Emerald Rapids, AVX-512 + bf16), about 3x slower on the small GPT than its
// SkylakeX kernels. OpenBLAS reads OPENBLAS_CORETYPE in its load-time constructor, so the correction is to set
// it and re-execute the process before any work (engine/cli/runtime_env.cpp does that).
//
// The rule (decide_blas_coretype, a pure function of its inputs):
//   - the best core the CPU allows: AVX-512 F/DQ/BW/VL -> SkylakeX, plus avx512_bf16 -> Cooperlake (only from
//     OpenBLAS 0.3.22: 0.3.21's name lookup stops one entry short of Cooperlake, so it answers
//     OPENBLAS_CORETYPE=Cooperlake with "Core not found" and falls back to its feature ladder, which lands on
//     Cooperlake on a bf16 CPU by accident, as any unknown name would; Cleave does not lean on that, and
//     nothing is lost: Cooperlake adds bf16 sbgemm kernels to SkylakeX's, with the same sgemm kernels and
//     blocking, and Cleave calls only sgemm); AVX2 + FMA -> Haswell (AMD: Zen); AVX -> Sandybridge (AMD:
//     Bulldozer); older CPUs: nothing to correct. SapphireRapids (AMX) is not proposed: unverified as a
//     forcible name in the versions we ship on, and its additions are bf16 (sbgemm) kernels, not sgemm.
//   - the library's choice is ranked by ISA level (openblas_core_level); a choice at or above the best level is
//     kept, a name the table does not know (a newer core) is kept, a lower one is corrected.
//   - the user decides first: OPENBLAS_CORETYPE already in the environment is kept, and
//     CLEAVE_BLAS_CORETYPE=keep turns the correction off; both still warn when the kernels are older than
//     the CPU allows. CLEAVE_BLAS_CORETYPE=auto (or unset) is the default.
//   - after the re-exec (marker kCoretypeMarker = the core the library chose on its own) the decision checks
//     that OpenBLAS took the name, and warns when it did not.
//   - a BLAS that is not OpenBLAS (it dispatches by itself), a CPU that is not x86-64 and an OpenBLAS built for
//     one target only (no DYNAMIC_ARCH: the variable has no effect, so warn) are never re-executed.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "engine/core/cpu_features.hpp"

namespace cleave::kernels::cpu {

// Set by the process that sets OPENBLAS_CORETYPE before re-executing itself: the core OpenBLAS chose on its own.
inline constexpr const char* kCoretypeMarker = "CLEAVE_OPENBLAS_CORETYPE_FROM";
// The user's switch: "auto" (default) or "keep".
inline constexpr const char* kCoretypeSwitch = "CLEAVE_BLAS_CORETYPE";

struct BlasCoretypeInputs {
  CpuFeatures cpu;
  std::string blas_config;                   // openblas_get_config(): "OpenBLAS 0.3.21 ... DYNAMIC_ARCH ..."
  std::string core_name;                     // openblas_get_corename(): "Prescott", "SkylakeX", ...
  std::optional<std::string> env_coretype;   // OPENBLAS_CORETYPE as this process found it
  std::optional<std::string> env_switch;     // CLEAVE_BLAS_CORETYPE
  std::optional<std::string> env_marker;     // kCoretypeMarker: set only after Cleave's own re-exec
};

enum class BlasCoretypeAction {
  kKeep,         // nothing to change (message says why, for the log)
  kSetCoretype,  // export OPENBLAS_CORETYPE=coretype (and the marker) and re-execute
  kWarn,         // the kernels are older than the CPU allows and Cleave will not (or could not) change them
};

struct BlasCoretypeDecision {
  BlasCoretypeAction action = BlasCoretypeAction::kKeep;
  std::string coretype;  // kSetCoretype: the name to export
  std::string message;   // one line for the log, naming the cores, the CPU features and the fix
};

BlasCoretypeDecision decide_blas_coretype(const BlasCoretypeInputs& in);

// ISA level of an OpenBLAS x86-64 core name (case-insensitive): 0 SSE-only (Prescott, Nehalem, Core2, ...),
// 1 AVX (Sandybridge, Bulldozer, ...), 2 AVX2 (Haswell, Zen, Excavator), 3 AVX-512 (SkylakeX), 4 AVX-512 bf16
// (Cooperlake), 5 AMX (SapphireRapids); nullopt for a name the table does not know.
std::optional<int> openblas_core_level(std::string_view core);

// "0.3.21" in "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..." as 3021 (minor * 1000 + patch); nullopt otherwise.
std::optional<int> openblas_version(std::string_view config);

// The inputs of this process: cpuid, the loaded OpenBLAS and the environment.
BlasCoretypeInputs blas_coretype_inputs_of_this_process();

// For mains other than `cleave`'s (the test binaries; `cleave` folds this into its own single re-exec,
// engine/cli/runtime_env.cpp): on kSetCoretype exports OPENBLAS_CORETYPE and the marker and re-executes
// /proc/self/exe with argv; returns when there is nothing to change or the exec failed. The marker makes the
// re-executed process decide kKeep or kWarn, so it never loops. Call first in main(), before MPI and threads.
void reexec_with_blas_coretype(char** argv);

}  // namespace cleave::kernels::cpu

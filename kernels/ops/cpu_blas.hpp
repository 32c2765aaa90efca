// device.blas: which library runs the CPU backend's GEMMs (kernels/cpu/gemm_backend.hpp), with its name table
// (engine/core/enum_names.hpp) and the rule that resolves "auto". Header-only so the config reader can name
// and check it without linking the kernels.
//
// "auto", from the measurements in benchmarks/kernels/RESULTS-gemm-backends.md (reasons in docs/ops.md): oneDNN
// when it is built, else OpenBLAS. bf16 operands run oneDNN's bf16 kernels only where its ISA detection reports
// bf16 instructions (avx512_bf16, AMX); elsewhere they are widened to f32 first (oneDNN's bf16 without those
// instructions is emulated). Invariant: choose_cpu_gemm never returns kAuto, never a library that is not
// built, and asks for bf16 kernels only from oneDNN on bf16 instructions. What a run reports about its GEMMs
// (`cleave version`, the run log, run.json's cpu_gemm) is choose_cpu_gemms' answer worded by describe_cpu_gemms:
// the reports read the rule, they never restate it.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "cleave/config.hpp"
#include "engine/core/enum_names.hpp"

namespace cleave::ops {

enum class CpuBlas { kAuto, kOpenBlas, kBlis, kOneDnn };
constexpr std::array<EnumName<CpuBlas>, 4> enum_names(CpuBlas) {
  return {{{CpuBlas::kAuto, "auto"},
           {CpuBlas::kOpenBlas, "openblas"},
           {CpuBlas::kBlis, "blis"},
           {CpuBlas::kOneDnn, "onednn"}}};
}

// Whether this build links the library (CMake's optional probes, cleave/config.hpp). auto and openblas always.
constexpr bool cpu_blas_built(CpuBlas blas) {
  switch (blas) {
    case CpuBlas::kBlis: return CLEAVE_WITH_BLIS != 0;
    case CpuBlas::kOneDnn: return CLEAVE_WITH_ONEDNN != 0;
    default: return true;
  }
}

// The names device.blas accepts in this build, e.g. "auto, openblas, onednn".
inline std::string cpu_blas_available() {
  std::string names;
  for (const auto& e : enum_names(CpuBlas{})) {
    if (!cpu_blas_built(e.value)) continue;
    if (!names.empty()) names += ", ";
    names += e.name;
  }
  return names;
}

// What "auto" looks at: which libraries are built and whether oneDNN runs bf16 on hardware instructions
// (kernels::cpu::onednn_bf16_instructions). Passed in, so the rule is testable on recorded facts.
struct CpuBlasFacts {
  bool blis_built = false;
  bool onednn_built = false;
  bool onednn_bf16_instructions = false;
};

inline CpuBlasFacts build_cpu_blas_facts(bool onednn_bf16_instructions) {
  return {cpu_blas_built(CpuBlas::kBlis), cpu_blas_built(CpuBlas::kOneDnn), onednn_bf16_instructions};
}

// What a GEMM runs on: the library, and whether bf16 operands go to its bf16 kernels (else widened to f32).
struct CpuGemmChoice {
  CpuBlas library = CpuBlas::kOpenBlas;
  bool bf16_kernels = false;
  friend constexpr bool operator==(const CpuGemmChoice&, const CpuGemmChoice&) = default;
};

// The choice for a GEMM whose operands are bf16 (true) or f32 (false). A requested library that is not built
// falls back to OpenBLAS here; the config reader refuses such a request before a run starts.
constexpr CpuGemmChoice choose_cpu_gemm(CpuBlas requested, bool bf16_operands, const CpuBlasFacts& facts) {
  CpuBlas library = CpuBlas::kOpenBlas;
  if (requested == CpuBlas::kBlis && facts.blis_built) library = CpuBlas::kBlis;
  if ((requested == CpuBlas::kOneDnn || requested == CpuBlas::kAuto) && facts.onednn_built) {
    library = CpuBlas::kOneDnn;
  }
  const bool bf16_kernels = bf16_operands && library == CpuBlas::kOneDnn && facts.onednn_bf16_instructions;
  return {library, bf16_kernels};
}

// The choice for each operand dtype of a run with device.blas `requested`: choose_cpu_gemm for f32 and for bf16.
struct CpuGemmChoices {
  CpuBlas requested = CpuBlas::kAuto;
  CpuGemmChoice f32;
  CpuGemmChoice bf16;
  friend constexpr bool operator==(const CpuGemmChoices&, const CpuGemmChoices&) = default;
};

constexpr CpuGemmChoices choose_cpu_gemms(CpuBlas requested, const CpuBlasFacts& facts) {
  return {requested, choose_cpu_gemm(requested, false, facts), choose_cpu_gemm(requested, true, facts)};
}

// The libraries the choices run on, each once, f32's first (the libraries whose versions a report names).
inline std::vector<CpuBlas> cpu_gemm_libraries(const CpuGemmChoices& choices) {
  std::vector<CpuBlas> libraries{choices.f32.library};
  if (choices.bf16.library != choices.f32.library) libraries.push_back(choices.bf16.library);
  return libraries;
}

// "f32 onednn, bf16 onednn on bf16 kernels (device.blas auto)"; bf16 operands on a library without bf16 kernels
// read "bf16 openblas widened to f32".
inline std::string describe_cpu_gemms(const CpuGemmChoices& choices) {
  std::string text = "f32 " + std::string(enum_name(choices.f32.library)) + ", bf16 " +
                     std::string(enum_name(choices.bf16.library));
  text += choices.bf16.bf16_kernels ? " on bf16 kernels" : " widened to f32";
  return text + " (device.blas " + std::string(enum_name(choices.requested)) + ")";
}

}  // namespace cleave::ops

// The CPU this process runs on, as cpuid and the OS describe it: vendor, family, model, the brand string and
// the vector features Cleave's kernels (and the BLAS under them) can use.
//
// Invariant: a feature is reported only when it is usable, i.e. the CPU has it (cpuid) AND the OS saves its
// register state (XCR0 via xgetbv): an AVX-512 CPU under a kernel or hypervisor that does not enable the zmm
// state reports avx512f = false. AMX is reported by cpuid and XCR0 (Linux also wants a per-process permission
// request before the first tile instruction; that is the using library's business). On a CPU that is not
// x86-64 every field stays at its default (vendor empty).
//
// read_cpu_features() is the only function here that looks at the machine; describe_cpu() and
// cpu_feature_list() are pure, so tests feed them recorded feature sets. Adding a feature: one bool here, its
// cpuid bit in cpu_features.cpp, its name in cpu_feature_list().
#pragma once

#include <string>

namespace cleave {

struct CpuFeatures {
  std::string vendor;      // cpuid leaf 0: "GenuineIntel", "AuthenticAMD"; empty when not x86-64
  int family = 0;          // display family (base + extended)
  int model = 0;           // display model (extended model folded in for families 6 and >= 15)
  std::string model_name;  // the brand string, e.g. "Intel(R) Xeon(R) Platinum 8581C CPU @ 2.10GHz"
  bool avx = false;
  bool fma = false;
  bool avx2 = false;
  bool avx512f = false;
  bool avx512dq = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512_bf16 = false;
  bool avx512_fp16 = false;
  bool amx_tile = false;
  bool amx_bf16 = false;

  bool is_intel() const { return vendor == "GenuineIntel"; }
  bool is_amd() const { return vendor == "AuthenticAMD" || vendor == "HygonGenuine"; }
  // The AVX-512 subset every AVX-512 server core since Skylake-SP has (what OpenBLAS's SkylakeX kernels use).
  bool avx512_common() const { return avx512f && avx512dq && avx512bw && avx512vl; }
};

// cpuid + xgetbv of the calling thread's CPU (all cores of a machine are assumed alike).
CpuFeatures read_cpu_features();

// "avx avx2 fma avx512f avx512dq avx512bw avx512vl avx512_bf16 amx_tile amx_bf16"; "none" when empty.
std::string cpu_feature_list(const CpuFeatures& cpu);

// One line for logs, `cleave version` and run.json:
// "Intel(R) Xeon(R) ... (GenuineIntel family 6 model 207; avx avx2 ... amx_bf16)", or "not x86-64".
std::string describe_cpu(const CpuFeatures& cpu);

}  // namespace cleave

// See cpu_features.hpp. The bit positions are Intel SDM vol. 2A, CPUID (leaf 1 ECX, leaf 7 subleaves 0 and 1)
// and vol. 1 §13 (XCR0 state components); AMD documents the same bits for the features it implements.
#include "engine/core/cpu_features.hpp"

#include <cstdint>
#include <cstring>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define CLEAVE_CPUID_X86 1
#endif

#include <fmt/format.h>

namespace cleave {
namespace {

#ifdef CLEAVE_CPUID_X86
struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

bool cpuid(unsigned leaf, unsigned subleaf, Regs& r) { return __get_cpuid_count(leaf, subleaf, &r.a, &r.b, &r.c, &r.d) != 0; }

std::uint64_t xgetbv0() {
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}

bool bit(unsigned value, int n) { return ((value >> n) & 1u) != 0; }

std::string trimmed(const char* text) {
  std::string s(text);
  const auto first = s.find_first_not_of(' ');
  if (first == std::string::npos) return {};
  const auto last = s.find_last_not_of(' ');
  return s.substr(first, last - first + 1);
}
#endif

}  // namespace

CpuFeatures read_cpu_features() {
  CpuFeatures cpu;
#ifdef CLEAVE_CPUID_X86
  Regs r;
  if (!cpuid(0, 0, r)) return cpu;
  const unsigned max_leaf = r.a;
  char vendor[13] = {};
  std::memcpy(vendor + 0, &r.b, 4);
  std::memcpy(vendor + 4, &r.d, 4);
  std::memcpy(vendor + 8, &r.c, 4);
  cpu.vendor = vendor;

  Regs l1;
  cpuid(1, 0, l1);
  const int base_family = static_cast<int>((l1.a >> 8) & 0xf);
  const int base_model = static_cast<int>((l1.a >> 4) & 0xf);
  cpu.family = base_family == 0xf ? base_family + static_cast<int>((l1.a >> 20) & 0xff) : base_family;
  cpu.model = (base_family == 6 || base_family == 0xf) ? base_model + (static_cast<int>((l1.a >> 16) & 0xf) << 4)
                                                        : base_model;
  // XCR0: bits 1-2 SSE/AVX state, 5-7 opmask and zmm state, 17-18 AMX tile config and data.
  const bool osxsave = bit(l1.c, 27);
  const std::uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool os_avx = (xcr0 & 0x6) == 0x6;
  const bool os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;
  cpu.avx = os_avx && bit(l1.c, 28);
  cpu.fma = os_avx && bit(l1.c, 12);
  if (max_leaf >= 7) {
    Regs l7;
    cpuid(7, 0, l7);
    cpu.avx2 = os_avx && bit(l7.b, 5);
    cpu.avx512f = os_avx512 && bit(l7.b, 16);
    cpu.avx512dq = os_avx512 && bit(l7.b, 17);
    cpu.avx512bw = os_avx512 && bit(l7.b, 30);
    cpu.avx512vl = os_avx512 && bit(l7.b, 31);
    cpu.avx512_fp16 = os_avx512 && bit(l7.d, 23);
    cpu.amx_bf16 = os_amx && bit(l7.d, 22);
    cpu.amx_tile = os_amx && bit(l7.d, 24);
    if (l7.a >= 1) {
      Regs l71;
      cpuid(7, 1, l71);
      cpu.avx512_bf16 = os_avx512 && bit(l71.a, 5);
    }
  }
  Regs ext;
  if (cpuid(0x80000000u, 0, ext) && ext.a >= 0x80000004u) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      Regs b;
      cpuid(0x80000002u + i, 0, b);
      std::memcpy(brand + 16 * i + 0, &b.a, 4);
      std::memcpy(brand + 16 * i + 4, &b.b, 4);
      std::memcpy(brand + 16 * i + 8, &b.c, 4);
      std::memcpy(brand + 16 * i + 12, &b.d, 4);
    }
    cpu.model_name = trimmed(brand);
  }
#endif
  return cpu;
}

std::string cpu_feature_list(const CpuFeatures& cpu) {
  const std::pair<bool, const char*> features[] = {
      {cpu.avx, "avx"},           {cpu.avx2, "avx2"},           {cpu.fma, "fma"},
      {cpu.avx512f, "avx512f"},   {cpu.avx512dq, "avx512dq"},   {cpu.avx512bw, "avx512bw"},
      {cpu.avx512vl, "avx512vl"}, {cpu.avx512_bf16, "avx512_bf16"}, {cpu.avx512_fp16, "avx512_fp16"},
      {cpu.amx_tile, "amx_tile"}, {cpu.amx_bf16, "amx_bf16"},
  };
  std::string list;
  for (const auto& [on, name] : features) {
    if (!on) continue;
    if (!list.empty()) list += ' ';
    list += name;
  }
  return list.empty() ? "none" : list;
}

std::string describe_cpu(const CpuFeatures& cpu) {
  if (cpu.vendor.empty()) return "not x86-64 (no cpuid)";
  return fmt::format("{} ({} family {} model {}; {})", cpu.model_name.empty() ? "unnamed CPU" : cpu.model_name,
                     cpu.vendor, cpu.family, cpu.model, cpu_feature_list(cpu));
}

}  // namespace cleave

// The CPU description is a pure function of a recorded feature set (never of the machine the test runs on), and
// the reader keeps its invariant: AVX-512 is reported only where AVX2 (and so the OS's AVX state) is too.
#include "engine/core/cpu_features.hpp"

#include <gtest/gtest.h>

namespace cleave::cpu_features_test {
namespace {

CpuFeatures emerald_rapids() {
  CpuFeatures c;
  c.vendor = "GenuineIntel";
  c.family = 6;
  c.model = 207;
  c.model_name = "INTEL(R) XEON(R) PLATINUM 8581C CPU @ 2.10GHz";
  c.avx = c.fma = c.avx2 = true;
  c.avx512f = c.avx512dq = c.avx512bw = c.avx512vl = true;
  c.avx512_bf16 = c.avx512_fp16 = true;
  c.amx_tile = c.amx_bf16 = true;
  return c;
}

TEST(CpuFeatures, DescribesARecordedIntelCpu) {
  EXPECT_EQ(describe_cpu(emerald_rapids()),
            "INTEL(R) XEON(R) PLATINUM 8581C CPU @ 2.10GHz (GenuineIntel family 6 model 207; avx avx2 fma avx512f "
            "avx512dq avx512bw avx512vl avx512_bf16 avx512_fp16 amx_tile amx_bf16)");
  EXPECT_TRUE(emerald_rapids().avx512_common());
  EXPECT_TRUE(emerald_rapids().is_intel());
}

// Recorded 2026-12-01: the KVM guest's Xeon (cpuid leaf 1 eax 0xa0678: base model 7, extended model 10, so the
// display model is 167), AVX-512 with bf16, fp16 and AMX, its XCR0 0x602e7 (tile state enabled by the OS).
TEST(CpuFeatures, DescribesTheRecordedKvmXeonModel167) {
  CpuFeatures c = emerald_rapids();
  c.model = 167;
  c.model_name = "Intel(R) Xeon(R) Processor";
  EXPECT_EQ(describe_cpu(c),
            "Intel(R) Xeon(R) Processor (GenuineIntel family 6 model 167; avx avx2 fma avx512f avx512dq avx512bw "
            "avx512vl avx512_bf16 avx512_fp16 amx_tile amx_bf16)");
}

TEST(CpuFeatures, DescribesOldAndUnknownCpus) {
  CpuFeatures old;
  old.vendor = "AuthenticAMD";
  old.family = 16;
  old.model = 4;
  EXPECT_EQ(cpu_feature_list(old), "none");
  EXPECT_EQ(describe_cpu(old), "unnamed CPU (AuthenticAMD family 16 model 4; none)");
  EXPECT_TRUE(old.is_amd());
  EXPECT_FALSE(old.avx512_common());
  EXPECT_EQ(describe_cpu(CpuFeatures{}), "not x86-64 (no cpuid)");
  CpuFeatures partial = emerald_rapids();
  partial.avx512vl = false;  // F without VL is not the SkylakeX set
  EXPECT_FALSE(partial.avx512_common());
}

TEST(CpuFeatures, ReaderReportsAvx512OnlyWithAvx2) {
  const CpuFeatures here = read_cpu_features();
  if (here.avx512f) {
    EXPECT_TRUE(here.avx2 && here.avx) << describe_cpu(here);
  }
  if (here.avx2) {
    EXPECT_TRUE(here.avx) << describe_cpu(here);
  }
  if (here.vendor.empty()) {
    EXPECT_EQ(cpu_feature_list(here), "none");
  }
}

}  // namespace
}  // namespace cleave::cpu_features_test

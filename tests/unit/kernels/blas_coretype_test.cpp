// The start-up BLAS check (kernels/cpu/blas_coretype.hpp) on recorded CPUs and OpenBLAS answers, never on the
// machine the test runs on: the generic or older kernels a DYNAMIC_ARCH OpenBLAS picks for a CPU it does not
// know are corrected to the best core the CPU allows and the version accepts; a good choice, a user's
// OPENBLAS_CORETYPE, the opt-out, another BLAS and a single-target build are left alone (with a warning where
// the kernels are older than the CPU allows); after the re-exec the check confirms or warns.
#include "kernels/cpu/blas_coretype.hpp"

#include <gtest/gtest.h>

#include <string>
#include <utility>

namespace cleave::kernels::cpu::blas_coretype_test {
namespace {

constexpr const char* kDebian0321 = "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY Prescott MAX_THREADS=64";
constexpr const char* kOpenBlas0326 = "OpenBLAS 0.3.26 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64";

CpuFeatures intel(int model, bool avx512, bool bf16, bool amx) {
  CpuFeatures c;
  c.vendor = "GenuineIntel";
  c.family = 6;
  c.model = model;
  c.avx = c.fma = c.avx2 = true;
  c.avx512f = c.avx512dq = c.avx512bw = c.avx512vl = avx512;
  c.avx512_bf16 = bf16;
  c.avx512_fp16 = amx;
  c.amx_tile = c.amx_bf16 = amx;
  return c;
}

CpuFeatures zen(int model, bool avx512) {
  CpuFeatures c;
  c.vendor = "AuthenticAMD";
  c.family = 25;
  c.model = model;
  c.avx = c.fma = c.avx2 = true;
  c.avx512f = c.avx512dq = c.avx512bw = c.avx512vl = c.avx512_bf16 = avx512;  // Zen 4 has avx512_bf16
  return c;
}

BlasCoretypeInputs inputs(CpuFeatures cpu, std::string config, std::string core) {
  BlasCoretypeInputs in;
  in.cpu = std::move(cpu);
  in.blas_config = std::move(config);
  in.core_name = std::move(core);
  return in;
}

TEST(BlasCoretype, EmeraldRapidsOnPrescottGetsSkylakeXFromOpenBlas0321) {
  // Intel family 6 model 207 (AVX-512, bf16, AMX) under Debian 12's OpenBLAS: Prescott. 0.3.21 cannot be told
  // Cooperlake ("Core not found"), so SkylakeX.
  const auto d = decide_blas_coretype(inputs(intel(207, true, true, true), kDebian0321, "Prescott"));
  EXPECT_EQ(d.action, BlasCoretypeAction::kSetCoretype) << d.message;
  EXPECT_EQ(d.coretype, "SkylakeX");
  EXPECT_NE(d.message.find("Prescott"), std::string::npos) << d.message;
  EXPECT_NE(d.message.find("family 6 model 207"), std::string::npos) << d.message;
}

TEST(BlasCoretype, SapphireRapidsOnHaswellGetsSkylakeX) {
  const auto d = decide_blas_coretype(inputs(intel(143, true, true, true), kDebian0321, "Haswell"));
  EXPECT_EQ(d.action, BlasCoretypeAction::kSetCoretype) << d.message;
  EXPECT_EQ(d.coretype, "SkylakeX");
}

TEST(BlasCoretype, Bf16CpuGetsCooperlakeWhereTheVersionAcceptsIt) {
  const auto d = decide_blas_coretype(inputs(intel(207, true, true, true), kOpenBlas0326, "Haswell"));
  EXPECT_EQ(d.action, BlasCoretypeAction::kSetCoretype) << d.message;
  EXPECT_EQ(d.coretype, "Cooperlake");
  // ...and SkylakeX from such a version is still one level short of Cooperlake.
  EXPECT_EQ(decide_blas_coretype(inputs(intel(207, true, true, true), kOpenBlas0326, "SkylakeX")).coretype,
            "Cooperlake");
}

// Recorded on 2026-12-01 (the first Intel machine the project ran on): "Intel(R) Xeon(R) Processor" under KVM,
// GenuineIntel family 6 model 167, AVX-512 with avx512_bf16, avx512_fp16 and AMX (tile, bf16; the OS grants the
// tile state). Debian 12's OpenBLAS 0.3.21 files model 167 under Rocket Lake and picks SkylakeX on its own;
// OPENBLAS_CORETYPE=Cooperlake (or any name 0.3.21 does not find) makes it report Cooperlake.
constexpr const char* kDebian0321SkylakeX =
    "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY SkylakeX MAX_THREADS=64";

TEST(BlasCoretype, XeonModel167KeepsTheSkylakeXThatOpenBlas0321Picks) {
  const CpuFeatures xeon167 = intel(167, true, true, true);
  // SkylakeX is the best core 0.3.21 can be told on a bf16 CPU: kept, no re-exec, no warning.
  const auto d = decide_blas_coretype(inputs(xeon167, kDebian0321SkylakeX, "SkylakeX"));
  EXPECT_EQ(d.action, BlasCoretypeAction::kKeep) << d.message;
  EXPECT_TRUE(d.coretype.empty());
  EXPECT_NE(d.message.find("SkylakeX (the library's choice"), std::string::npos) << d.message;
  // The opt-out changes nothing where nothing is older than the CPU allows: still no warning.
  auto opt_out = inputs(xeon167, kDebian0321SkylakeX, "SkylakeX");
  opt_out.env_switch = "keep";
  EXPECT_EQ(decide_blas_coretype(opt_out).action, BlasCoretypeAction::kKeep);
  // A user's OPENBLAS_CORETYPE=Cooperlake, which 0.3.21 reports as Cooperlake here: kept.
  auto forced = inputs(xeon167, "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY Cooperlake MAX_THREADS=64",
                       "Cooperlake");
  forced.env_coretype = "Cooperlake";
  EXPECT_EQ(decide_blas_coretype(forced).action, BlasCoretypeAction::kKeep);
  // The same CPU forced down to generic kernels is warned about, naming the core it allows.
  auto generic = inputs(xeon167, kDebian0321, "Prescott");
  generic.env_coretype = "Prescott";
  const auto warned = decide_blas_coretype(generic);
  EXPECT_EQ(warned.action, BlasCoretypeAction::kWarn) << warned.message;
  EXPECT_NE(warned.message.find("older than the SkylakeX"), std::string::npos) << warned.message;
  EXPECT_NE(warned.message.find("family 6 model 167"), std::string::npos) << warned.message;
  // Left to Cleave, a generic choice on this CPU is corrected to SkylakeX (0.3.21), Cooperlake (0.3.22 on).
  EXPECT_EQ(decide_blas_coretype(inputs(xeon167, kDebian0321, "Prescott")).coretype, "SkylakeX");
  EXPECT_EQ(decide_blas_coretype(inputs(xeon167, kOpenBlas0326, "SkylakeX")).coretype, "Cooperlake");
}

TEST(BlasCoretype, GoodChoicesAreKept) {
  // Skylake-X with SkylakeX; Zen 4 with Cooperlake (what 0.3.21 picks on it); Sapphire Rapids with a core this
  // table ranks higher; a core name the table does not know (a newer one) is never "corrected".
  for (const auto& [cpu, core] : {std::pair{intel(85, true, false, false), "SkylakeX"},
                                  std::pair{zen(17, true), "Cooperlake"},
                                  std::pair{intel(143, true, true, true), "SapphireRapids"},
                                  std::pair{intel(207, true, true, true), "GraniteRapids"},
                                  std::pair{intel(63, false, false, false), "Haswell"},
                                  std::pair{zen(1, false), "Zen"},
                                  std::pair{zen(1, false), "Haswell"}}) {
    const auto d = decide_blas_coretype(inputs(cpu, kDebian0321, core));
    EXPECT_EQ(d.action, BlasCoretypeAction::kKeep) << core << ": " << d.message;
    EXPECT_TRUE(d.coretype.empty());
  }
}

TEST(BlasCoretype, ZenFourOnTheZenCoreOfAnOlderOpenBlasGetsAvx512Kernels) {
  const auto d = decide_blas_coretype(
      inputs(zen(17, true), "OpenBLAS 0.3.20 DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=64", "Zen"));
  EXPECT_EQ(d.action, BlasCoretypeAction::kSetCoretype) << d.message;
  EXPECT_EQ(d.coretype, "SkylakeX");
}

TEST(BlasCoretype, Avx2CpusOnGenericKernelsGetTheirVendorsAvx2Core) {
  const auto haswell = decide_blas_coretype(inputs(intel(63, false, false, false), kDebian0321, "Prescott"));
  EXPECT_EQ(haswell.action, BlasCoretypeAction::kSetCoretype);
  EXPECT_EQ(haswell.coretype, "Haswell");
  const auto zen3 = decide_blas_coretype(inputs(zen(1, false), kDebian0321, "Barcelona"));
  EXPECT_EQ(zen3.action, BlasCoretypeAction::kSetCoretype);
  EXPECT_EQ(zen3.coretype, "Zen");
  // Core names are compared case-insensitively (OPENBLAS_CORETYPE accepts any case).
  EXPECT_EQ(decide_blas_coretype(inputs(intel(63, false, false, false), kDebian0321, "HASWELL")).action,
            BlasCoretypeAction::kKeep);
}

TEST(BlasCoretype, OldCpusAndOtherLibrariesAreLeftAlone) {
  CpuFeatures core2;
  core2.vendor = "GenuineIntel";
  core2.family = 6;
  core2.model = 23;
  EXPECT_EQ(decide_blas_coretype(inputs(core2, kDebian0321, "Penryn")).action, BlasCoretypeAction::kKeep);
  const auto blis = decide_blas_coretype(inputs(intel(207, true, true, true), "BLIS 0.9.0", "skx"));
  EXPECT_EQ(blis.action, BlasCoretypeAction::kKeep);
  EXPECT_NE(blis.message.find("not OpenBLAS"), std::string::npos) << blis.message;
  EXPECT_EQ(decide_blas_coretype(inputs(CpuFeatures{}, "OpenBLAS 0.3.21 DYNAMIC_ARCH ARMV8", "NEOVERSEN1")).action,
            BlasCoretypeAction::kKeep);
}

TEST(BlasCoretype, TheUserDecidesFirstButIsWarned) {
  auto in = inputs(intel(207, true, true, true), kDebian0321, "Haswell");
  in.env_coretype = "Haswell";
  const auto forced = decide_blas_coretype(in);
  EXPECT_EQ(forced.action, BlasCoretypeAction::kWarn);
  EXPECT_NE(forced.message.find("unset OPENBLAS_CORETYPE"), std::string::npos) << forced.message;
  in.core_name = "SkylakeX";
  in.env_coretype = "SkylakeX";
  EXPECT_EQ(decide_blas_coretype(in).action, BlasCoretypeAction::kKeep);

  auto opt_out = inputs(intel(207, true, true, true), kDebian0321, "Prescott");
  opt_out.env_switch = "keep";
  const auto kept = decide_blas_coretype(opt_out);
  EXPECT_EQ(kept.action, BlasCoretypeAction::kWarn);
  EXPECT_NE(kept.message.find("CLEAVE_BLAS_CORETYPE=keep"), std::string::npos) << kept.message;
  opt_out.env_switch = "auto";
  EXPECT_EQ(decide_blas_coretype(opt_out).action, BlasCoretypeAction::kSetCoretype);
  opt_out.env_switch = "sometimes";
  const auto bad = decide_blas_coretype(opt_out);
  EXPECT_EQ(bad.action, BlasCoretypeAction::kWarn);
  EXPECT_NE(bad.message.find("CLEAVE_BLAS_CORETYPE=sometimes"), std::string::npos) << bad.message;
}

TEST(BlasCoretype, SingleTargetBuildsCannotBeCorrected) {
  const auto d = decide_blas_coretype(
      inputs(intel(207, true, true, true), "OpenBLAS 0.3.21 NO_AFFINITY PRESCOTT MAX_THREADS=64", "Prescott"));
  EXPECT_EQ(d.action, BlasCoretypeAction::kWarn);
  EXPECT_NE(d.message.find("TARGET=SkylakeX"), std::string::npos) << d.message;
}

TEST(BlasCoretype, AfterTheReexecTheCoreIsConfirmedOrWarnedAbout) {
  auto in = inputs(intel(207, true, true, true), kDebian0321, "SkylakeX");
  in.env_coretype = "SkylakeX";
  in.env_marker = "Prescott";
  const auto took = decide_blas_coretype(in);
  EXPECT_EQ(took.action, BlasCoretypeAction::kKeep);
  EXPECT_NE(took.message.find("set by Cleave"), std::string::npos) << took.message;
  EXPECT_NE(took.message.find("chose Prescott"), std::string::npos) << took.message;
  in.core_name = "Prescott";  // the library ignored the name
  const auto ignored = decide_blas_coretype(in);
  EXPECT_EQ(ignored.action, BlasCoretypeAction::kWarn);
  EXPECT_NE(ignored.message.find("had no effect"), std::string::npos) << ignored.message;
}

TEST(BlasCoretype, LevelsAndVersions) {
  EXPECT_EQ(openblas_core_level("Prescott"), 0);
  EXPECT_EQ(openblas_core_level("sandybridge"), 1);
  EXPECT_EQ(openblas_core_level("Zen"), 2);
  EXPECT_EQ(openblas_core_level("SkylakeX"), 3);
  EXPECT_EQ(openblas_core_level("Cooperlake"), 4);
  EXPECT_EQ(openblas_core_level("NEOVERSEN1"), std::nullopt);
  EXPECT_EQ(openblas_version(kDebian0321), 3021);
  EXPECT_EQ(openblas_version("OpenBLAS 0.3.9.dev DYNAMIC_ARCH"), 3009);
  EXPECT_EQ(openblas_version("BLIS 0.9.0"), std::nullopt);
  EXPECT_EQ(openblas_version("OpenBLAS unknown"), std::nullopt);
}

}  // namespace
}  // namespace cleave::kernels::cpu::blas_coretype_test

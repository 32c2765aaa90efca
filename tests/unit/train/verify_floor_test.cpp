// cleave verify's bf16 noise floor (engine/train/verify_floor.hpp) as pure functions: the twin differs from its
// reference in device.blas and the order of attention's sums only (the latter's effect: OpsAttention.Reordered*) and
// exists only for bf16 on the cpu with a second library built; `moved` measures a
// difference against how far training moved the tensor; the floor is the twin's largest; a tensor passes within the
// fixed tolerance of its scale or within multiple x floor of its movement, and NaN passes neither. The precision
// twin is the reference in fp32 (bf16 only); a tensor also passes within factor x its own fp32 difference.
#include <gtest/gtest.h>

#include <limits>

#include "engine/train/verify_compare.hpp"
#include "engine/train/verify_floor.hpp"
#include "kernels/ops/cpu_blas.hpp"

namespace cleave::train {
namespace {

config::RunConfig bf16_cpu() {
  config::RunConfig c;
  c.device.precision = ops::Precision::kBf16;
  return c;
}

TEST(VerifyFloor, TwinChangesTheGemmLibraryAndAttentionsSumOrderOnlyAndOnlyInBf16OnTheCpu) {
  config::RunConfig fp32;
  EXPECT_FALSE(twin_reference(fp32).has_value());
  config::RunConfig cuda = bf16_cpu();
  cuda.device.type = DeviceType::kCuda;
  EXPECT_FALSE(twin_reference(cuda).has_value());
  const config::RunConfig reference = bf16_cpu();
  const std::optional<config::RunConfig> twin = twin_reference(reference);
  const bool second_library = ops::cpu_blas_built(ops::CpuBlas::kOneDnn) || ops::cpu_blas_built(ops::CpuBlas::kBlis);
  ASSERT_EQ(twin.has_value(), second_library);
  if (!twin) return;
  EXPECT_NE(twin->device.blas, ops::CpuBlas::kAuto);
  EXPECT_EQ(reference.device.attention_sums, ops::AttentionSums::kKernel);
  EXPECT_EQ(twin->device.attention_sums, ops::AttentionSums::kReordered);
  config::RunConfig same = *twin;
  same.device.blas = reference.device.blas;
  same.device.attention_sums = reference.device.attention_sums;
  EXPECT_TRUE(same == reference);  // nothing else differs
  EXPECT_NE(describe_twin(reference, *twin).find("instead of"), std::string::npos);
  EXPECT_NE(describe_twin(reference, *twin).find("attention"), std::string::npos);
  // Another library than the reference's own, whichever that is.
  for (ops::CpuBlas own : {ops::CpuBlas::kOpenBlas, ops::CpuBlas::kOneDnn, ops::CpuBlas::kBlis}) {
    if (!ops::cpu_blas_built(own)) continue;
    config::RunConfig r = bf16_cpu();
    r.device.blas = own;
    const std::optional<config::RunConfig> t = twin_reference(r);
    ASSERT_TRUE(t.has_value()) << describe_twin(r, r);
    EXPECT_NE(t->device.blas, own);
  }
}

TEST(VerifyFloor, MovedIsTheDifferenceOverTheReferencesMovement) {
  const ParameterMap initial = {{"w", {1.0f, 2.0f}}, {"b", {0.0f, 0.0f}}};
  const ParameterMap reference = {{"w", {1.5f, 2.0f}}, {"b", {0.25f, -0.125f}}};
  const ParameterMap layout = {{"w", {1.5f, 2.125f}}, {"b", {0.25f, -0.125f}}};
  const ParamComparison c = compare_parameters(layout, reference, {}, 0, &initial);
  ASSERT_EQ(c.params.size(), 2u);
  EXPECT_EQ(c.params[0].name, "b");
  EXPECT_EQ(c.params[0].moved, 0);
  EXPECT_DOUBLE_EQ(c.params[1].normalised, 0.125 / 2.0);
  EXPECT_DOUBLE_EQ(c.params[1].moved, 0.125 / 0.5);
  EXPECT_EQ(compare_parameters(layout, reference, {}, 0).params[1].moved, 0);  // no initial values: not measured
}

TEST(VerifyFloor, FloorIsTheTwinsLargestAndATensorPassesEitherWay) {
  ParamComparison twin;
  twin.params = {{"a", 4, 1e-4, 2e-3, 0.02}, {"b", 4, 1e-4, 1e-3, 0.05}, {"c", 4, 0, 0, 0}};
  const NoiseFloor f = noise_floor(twin, 3e-5, "device.blas openblas instead of onednn", 3);
  EXPECT_DOUBLE_EQ(f.floor, 0.05);
  EXPECT_EQ(f.worst, "b");
  EXPECT_DOUBLE_EQ(f.tolerance(), 0.15);
  EXPECT_DOUBLE_EQ(f.loss, 3e-5);
  const ParamDifference small_scale{"x", 4, 1e-6, 5e-4, 0.9};  // within 1e-3 of its scale: passes
  const ParamDifference small_moved{"x", 4, 1e-4, 1e-2, 0.1};  // beyond 1e-3, within 0.15 of its movement
  const ParamDifference neither{"x", 4, 1e-3, 1e-2, 0.5};      // half a movement off: a bug
  EXPECT_TRUE(tensor_within(small_scale, 1e-3, &f));
  EXPECT_TRUE(tensor_within(small_moved, 1e-3, &f));
  EXPECT_FALSE(tensor_within(small_moved, 1e-3, nullptr));  // fp32, or no twin: the fixed rule alone
  EXPECT_FALSE(tensor_within(neither, 1e-3, &f));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(tensor_within({"x", 4, nan, nan, nan}, 1e-3, &f));
}

TEST(VerifyFloor, PrecisionTwinIsTheReferenceInFp32AndHoldsEachTensorToItsOwnDifference) {
  config::RunConfig fp32;
  EXPECT_FALSE(precision_twin(fp32).has_value());
  const config::RunConfig reference = bf16_cpu();
  const std::optional<config::RunConfig> twin = precision_twin(reference);
  ASSERT_TRUE(twin.has_value());
  config::RunConfig same = *twin;
  same.device.precision = ops::Precision::kBf16;
  EXPECT_TRUE(same == reference);  // nothing else differs
  ParamComparison against;
  const double inf = std::numeric_limits<double>::infinity();
  against.params = {{"bias", 4, 2e-3, 0.5, 0}, {"weight", 4, 1e-5, 1e-5, 0}, {"broken", 4, inf, inf, 0}};
  const RoundingFloor r = rounding_floor(against, 1e-5, 3);
  EXPECT_DOUBLE_EQ(r.tolerance("bias"), 6e-3);
  EXPECT_DOUBLE_EQ(r.tolerance("weight"), 3e-5);
  EXPECT_EQ(r.tolerance("absent"), 0);
  EXPECT_NE(r.twin.find("fp32"), std::string::npos);
  EXPECT_TRUE(tensor_within({"bias", 4, 5e-3, 0.4, 0}, 1e-3, nullptr, &r));     // its own rounding's size
  EXPECT_FALSE(tensor_within({"weight", 4, 5e-3, 0.4, 0}, 1e-3, nullptr, &r));   // per tensor: not the bias's
  EXPECT_FALSE(tensor_within({"bias", 4, 7e-3, 0.5, 0}, 1e-3, nullptr, &r));     // past 3 x its own
  EXPECT_FALSE(tensor_within({"broken", 4, 1.0, 0.5, 0}, 1e-3, nullptr, &r));    // a non-finite twin passes nothing
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(tensor_within({"bias", 4, nan, nan, nan}, 1e-3, nullptr, &r));
}

}  // namespace
}  // namespace cleave::train

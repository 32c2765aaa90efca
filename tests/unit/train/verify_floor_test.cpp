// cleave verify's bf16 noise floor (engine/train/verify_floor.hpp) as pure functions: the twin differs from its
// reference in device.blas and the order of attention's sums only (the latter's effect: OpsAttention.Reordered*), the
// two twins each another way, and exist only for bf16 on the cpu with a second library built; `moved` measures a
// difference against how far training moved the tensor; the floor is the largest over every pair of the three runs
// (the two twins' pair too); a tensor passes within the fixed tolerance of its scale or within multiple x
// tp_factor x floor of its movement, and NaN passes neither. The precision
// twin is the reference in fp32 (bf16 only); a tensor also passes within factor x its own fp32 difference. The order
// twins (fp32 AdamW only) change the GEMM library or the micro-batch grouping and nothing else; their floor is per
// tensor, so a quiet tensor still fails half an AdamW step.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "engine/train/verify_compare.hpp"
#include "engine/train/verify_floor.hpp"
#include "kernels/ops/cpu_blas.hpp"

namespace cleave::train::verify_floor_test {
namespace {

config::RunConfig bf16_cpu() {
  config::RunConfig c;
  c.device.precision = ops::Precision::kBf16;
  return c;
}

TEST(VerifyFloor, TwinsChangeTheGemmLibraryAndAttentionsSumOrderOnlyEachAnotherWayAndOnlyInBf16OnTheCpu) {
  config::RunConfig fp32;
  EXPECT_TRUE(twin_references(fp32).empty());
  config::RunConfig cuda = bf16_cpu();
  cuda.device.type = DeviceType::kCuda;
  EXPECT_TRUE(twin_references(cuda).empty());
  const config::RunConfig reference = bf16_cpu();
  const std::vector<config::RunConfig> twins = twin_references(reference);
  const bool second_library = ops::cpu_blas_built(ops::CpuBlas::kOneDnn) || ops::cpu_blas_built(ops::CpuBlas::kBlis);
  ASSERT_EQ(twins.size(), second_library ? 2u : 0u);
  if (twins.empty()) return;
  EXPECT_NE(twins[0].device.blas, ops::CpuBlas::kAuto);
  EXPECT_EQ(twins[1].device.blas, reference.device.blas);  // the second twin keeps the library
  EXPECT_EQ(reference.device.attention_sums, ops::AttentionSums::kKernel);
  EXPECT_EQ(twins[0].device.attention_sums, ops::AttentionSums::kReordered);
  EXPECT_EQ(twins[1].device.attention_sums, ops::AttentionSums::kReorderedQuarters);
  EXPECT_FALSE(twins[0] == twins[1]);  // no two twins sum alike
  for (const config::RunConfig& twin : twins) {
    config::RunConfig same = twin;
    same.device.blas = reference.device.blas;
    same.device.attention_sums = reference.device.attention_sums;
    EXPECT_TRUE(same == reference);  // nothing else differs
    EXPECT_NE(describe_twin(reference, twin).find("attention"), std::string::npos);
  }
  EXPECT_NE(describe_twin(reference, twins[0]).find("instead of"), std::string::npos);
  EXPECT_NE(describe_twin(reference, twins[0]).find("halved"), std::string::npos);
  EXPECT_EQ(describe_twin(reference, twins[1]).find("instead of"), std::string::npos);
  EXPECT_NE(describe_twin(reference, twins[1]).find("quartered"), std::string::npos);
  // Another library than the reference's own, whichever that is.
  for (ops::CpuBlas own : {ops::CpuBlas::kOpenBlas, ops::CpuBlas::kOneDnn, ops::CpuBlas::kBlis}) {
    if (!ops::cpu_blas_built(own)) continue;
    config::RunConfig r = bf16_cpu();
    r.device.blas = own;
    const std::vector<config::RunConfig> t = twin_references(r);
    ASSERT_EQ(t.size(), 2u) << describe_twin(r, r);
    EXPECT_NE(t[0].device.blas, own);
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

TEST(VerifyFloor, FloorIsTheLargestOverEveryPairOfRunsAndATensorPassesEitherWay) {
  // Three runs of one tensor from 0: the reference moves to 1, twin 1 ends 0.02 from it, twin 2 0.05 the other way, so
  // the twins are 0.07 apart: the floor is that pair's, not either twin's against the reference.
  const ParameterMap initial = {{"w", {0.0f, 0.0f}}};
  const ParameterMap reference = {{"w", {1.0f, 0.5f}}};
  const std::vector<ParameterMap> twins = {{{"w", {1.0f, 0.52f}}}, {{"w", {1.0f, 0.45f}}}};
  const std::vector<FloorPair> pairs = floor_pairs(reference, initial, twins, {}, 0);
  ASSERT_EQ(pairs.size(), 3u);
  EXPECT_EQ(pairs[0].runs, "the reference and twin 1");
  EXPECT_NEAR(pairs[0].largest, 0.02, 1e-6);
  EXPECT_NEAR(pairs[1].largest, 0.05, 1e-6);
  EXPECT_EQ(pairs[2].runs, "twins 1 and 2");
  EXPECT_NEAR(pairs[2].largest, 0.07, 1e-6);
  EXPECT_EQ(pairs[2].worst, "w");
  const NoiseFloor twins_floor = noise_floor(pairs, 0, {"a", "b"}, 3, 1);
  EXPECT_NEAR(twins_floor.floor, 0.07, 1e-6);
  EXPECT_EQ(twins_floor.pair, "twins 1 and 2");
  // At tp 2 the tolerance is sqrt(2) times tp 1's: a reduced value carries 4 roundings where a reordering's carries 2.
  const NoiseFloor at_tp2 = noise_floor(pairs, 0, {"a", "b"}, 3, std::sqrt(2.0));
  EXPECT_NEAR(at_tp2.tolerance(), 3 * std::sqrt(2.0) * 0.07, 1e-6);
  // A pair with a NaN is the floor's largest and passes nothing, wherever it comes.
  for (std::size_t at = 0; at < 3; ++at) {
    std::vector<FloorPair> with_nan = pairs;
    with_nan[at].largest = std::numeric_limits<double>::quiet_NaN();
    const NoiseFloor f = noise_floor(with_nan, 0, {"a", "b"}, 3, 1);
    EXPECT_TRUE(std::isnan(f.floor)) << at;
    EXPECT_FALSE(tensor_within({"x", 4, 1e-4, 1e-2, 1e-9}, 1e-3, &f)) << at;
  }
  const NoiseFloor f = noise_floor({{"the reference and twin 1", 0.02, "a"}, {"the reference and twin 2", 0.05, "b"},
                                    {"twins 1 and 2", 0.0, "-"}},
                                   3e-5, {"device.blas openblas instead of onednn", "b"}, 3, 1);
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

// AdamW's first update is lr_0 sign(g) everywhere: a flip of one element's sign is 2 lr_0, as a fraction of an
// element's movement over the run 2 lr_0 / sum of lr. The default optimizer warms up linearly over 10 steps (lr_s
// proportional to s + 1): 1 step 2, 3 steps 2 / 6, 10 steps 2 / 55; a constant lr over 3 steps 2 / 3; SGD none.
TEST(VerifyFloor, AdamwFlipFractionIsOneFirstStepSignFlipOfMovementAndTheFloorIsNoLess) {
  config::OptimizerConfig adamw;
  ASSERT_EQ(adamw.type, config::OptimizerType::kAdamw);
  ASSERT_EQ(adamw.warmup_steps, 10);
  EXPECT_NEAR(adamw_flip_fraction(adamw, 1), 2.0, 1e-12);
  EXPECT_NEAR(adamw_flip_fraction(adamw, 3), 2.0 / 6, 1e-12);
  EXPECT_NEAR(adamw_flip_fraction(adamw, 10), 2.0 / 55, 1e-12);
  config::OptimizerConfig constant = adamw;
  constant.warmup_steps = 0;
  constant.schedule = config::LrScheduleType::kConstant;
  EXPECT_NEAR(adamw_flip_fraction(constant, 3), 2.0 / 3, 1e-12);
  config::OptimizerConfig sgd = adamw;
  sgd.type = config::OptimizerType::kSgd;
  EXPECT_EQ(adamw_flip_fraction(sgd, 3), 0);
  // The tolerance is multiple x tp_factor x the larger of the pairs' floor and the flip.
  const NoiseFloor below = noise_floor({{"the reference and twin 1", 0.05, "a"}}, 0, {"a"}, 3, 1, 1.0 / 3);
  EXPECT_DOUBLE_EQ(below.tolerance(), 1.0);
  const NoiseFloor above = noise_floor({{"the reference and twin 1", 0.5, "a"}}, 0, {"a"}, 3, 1, 1.0 / 3);
  EXPECT_DOUBLE_EQ(above.tolerance(), 1.5);
  const NoiseFloor nan = noise_floor({{"the reference and twin 1", std::nan(""), "a"}}, 0, {"a"}, 3, 1, 1.0 / 3);
  EXPECT_TRUE(std::isnan(nan.tolerance()));  // a twin that diverged passes nothing, flip or not
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

// fp32 AdamW's order twins: the reference with each other GEMM library built, nothing else; none under SGD, in bf16
// or on cuda. The order floor is per tensor, the largest over the twins: a tensor the twins leave quiet fails half an
// AdamW step on one element (lr 0.01: 5e-3 against a floor of 3 x 1e-7), a noisy one passes within 3 x its own.
TEST(VerifyFloor, OrderTwinsChangeOnlyTheGemmLibraryInFp32UnderAdamwAndBoundEachTensorByItsOwnDifference) {
  config::RunConfig adamw;
  adamw.optimizer.type = config::OptimizerType::kAdamw;
  config::RunConfig sgd = adamw;
  sgd.optimizer.type = config::OptimizerType::kSgd;
  EXPECT_TRUE(order_twins(sgd).empty());
  config::RunConfig bf16 = adamw;
  bf16.device.precision = ops::Precision::kBf16;
  EXPECT_TRUE(order_twins(bf16).empty());
  config::RunConfig cuda = adamw;
  cuda.device.type = DeviceType::kCuda;
  EXPECT_TRUE(order_twins(cuda).empty());
  const std::size_t built = ops::cpu_blas_built(ops::CpuBlas::kOneDnn) + ops::cpu_blas_built(ops::CpuBlas::kBlis);
  for (ops::CpuBlas own : {ops::CpuBlas::kOpenBlas, ops::CpuBlas::kOneDnn, ops::CpuBlas::kBlis}) {
    if (!ops::cpu_blas_built(own)) continue;
    config::RunConfig r = adamw;
    r.device.blas = own;
    r.batch.global_batch_size = 8;
    for (const std::int64_t micro : {4, 1, 3}) {  // halved; doubled (8 = 4 x 2); neither (8 is no multiple of 6)
      r.batch.micro_batch_size = micro;
      const std::vector<config::RunConfig> twins = order_twins(r);
      // every library built but the reference's own, and the micro-batches regrouped where they can be
      ASSERT_EQ(twins.size(), built + (micro == 3 ? 0 : 1));
      for (std::size_t k = 0; k < built; ++k) {
        EXPECT_NE(twins[k].device.blas, own);
        config::RunConfig same = twins[k];
        same.device.blas = own;
        EXPECT_TRUE(same == r);  // nothing else differs
      }
      if (micro == 3) continue;
      EXPECT_EQ(*twins.back().batch.micro_batch_size, micro == 4 ? 2 : 2);
      EXPECT_NE(describe_twin(r, twins.back()).find("batch.micro_batch_size 2 instead of"), std::string::npos);
      config::RunConfig same = twins.back();
      same.batch.micro_batch_size = micro;
      EXPECT_TRUE(same == r);
    }
  }
  ParamComparison quiet, noisy;
  quiet.params = {{"a", 4, 1e-7, 1e-7}, {"b", 4, 2e-3, 2e-3}};
  noisy.params = {{"a", 4, 3e-8, 3e-8}, {"b", 4, 4e-3, 4e-3}};
  const std::vector<ParamComparison> twins{quiet, noisy};
  const std::vector<std::string> described{"device.blas onednn instead of openblas",
                                           "device.blas blis instead of openblas"};
  const RoundingFloor f = order_floor(twins, described, 0, 3);
  EXPECT_TRUE(f.order);
  EXPECT_DOUBLE_EQ(f.tolerance("a"), 3e-7);   // the largest over the twins, times the factor
  EXPECT_DOUBLE_EQ(f.tolerance("b"), 1.2e-2);
  const double half_step = 0.5 * 0.01;
  EXPECT_FALSE(tensor_within({"a", 4, half_step, half_step / 0.5}, 1e-3, nullptr, &f));
  EXPECT_TRUE(tensor_within({"b", 4, 1e-2, 1e-2 / 0.5}, 1e-3, nullptr, &f));
  EXPECT_FALSE(tensor_within({"b", 4, 1.3e-2, 1.3e-2 / 0.5}, 1e-3, nullptr, &f));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  ParamComparison broken;
  broken.params = {{"a", 4, nan, nan}};
  const std::vector<ParamComparison> with_nan{quiet, broken};
  const RoundingFloor unbounded = order_floor(with_nan, described, 0, 3);
  EXPECT_FALSE(tensor_within({"a", 4, 1e-8, 2e-3}, 1e-3, nullptr, &unbounded));
}

}  // namespace
}  // namespace cleave::train::verify_floor_test

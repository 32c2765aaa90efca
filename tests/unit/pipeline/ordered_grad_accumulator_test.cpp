// OrderedGradAccumulator: micro-batch gradients combined in the canonical tree order (sum_tree.hpp), the
// total left in the parameter's own gradient tensor, memory reused across steps, misuse caught.
#include "pipeline/ordered_grad_accumulator.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/core/error.hpp"
#include "pipeline/stage_module.hpp"
#include "tests/reference/sum_tree_reference.hpp"

namespace cleave::pipeline::ordered_grad_accumulator_test {
namespace {


std::shared_ptr<layers::Param> make_param(const std::string& name, std::int64_t n) {
  auto p = std::make_shared<layers::Param>();
  p->name = name;
  p->value = Tensor::zeros({n}, DType::kF32, MemoryCategory::kParameters, cpu_allocator());
  p->grad = Tensor::zeros({n}, DType::kF32, MemoryCategory::kGradients, cpu_allocator());
  return p;
}

// Micro-batch contributions with magnitudes over 8 decades, so the order of additions shows in the bits.
std::vector<std::vector<float>> contributions(int microbatches, std::int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::vector<std::vector<float>> out(static_cast<std::size_t>(microbatches), std::vector<float>(n));
  for (auto& v : out) {
    for (auto& x : v) x = mantissa(gen) * std::pow(10.0f, static_cast<float>(gen() % 9) - 4.0f);
  }
  return out;
}

TEST(OrderedGradAccumulator, EveryMicrobatchCountGivesTheCanonicalSumInHome) {
  const std::int64_t n = 997;
  for (int microbatches : {1, 2, 3, 4, 5, 6, 7, 8, 12}) {
    SCOPED_TRACE(microbatches);
    auto p = make_param("w", n);
    auto q = make_param("b", 5);
    const Tensor home = p->grad;
    OrderedGradAccumulator acc({p, q}, microbatches);
    for (int step = 0; step < 2; ++step) {  // the second step reuses the first one's buffers
      p->grad.zero_();
      q->grad.zero_();
      const auto terms = contributions(microbatches, n, 100u * static_cast<unsigned>(microbatches) + step);
      for (int mb = 0; mb < microbatches; ++mb) {
        acc.begin_microbatch(mb);
        if (mb > 0) {
          EXPECT_NE(p->grad.raw_data(), home.raw_data()) << "micro-batch " << mb << " wrote into home";
        }
        float* g = p->grad.data<float>();
        for (std::int64_t i = 0; i < n; ++i) g[i] += terms[static_cast<std::size_t>(mb)][static_cast<std::size_t>(i)];
        acc.param_done(*p);
        acc.param_done(*q);
      }
      ASSERT_EQ(p->grad.raw_data(), home.raw_data()) << "Param::grad not restored to its own tensor";
      std::int64_t wrong = 0, differs_from_in_place = 0;
      std::vector<float> column(static_cast<std::size_t>(microbatches));
      for (std::int64_t i = 0; i < n; ++i) {
        float in_place = 0.0f;
        for (int mb = 0; mb < microbatches; ++mb) {
          column[static_cast<std::size_t>(mb)] = terms[static_cast<std::size_t>(mb)][static_cast<std::size_t>(i)];
          in_place += column[static_cast<std::size_t>(mb)];
        }
        const float want = testing::canonical_sum_reference(column, 0, column.size());
        const float got = home.data<float>()[i];
        wrong += std::memcmp(&want, &got, sizeof got) != 0;
        differs_from_in_place += in_place != want;
      }
      EXPECT_EQ(wrong, 0);
      if (microbatches >= 4) {
        EXPECT_GT(differs_from_in_place, 0) << "inputs too tame to show the order";
      }
    }
  }
}

// Expert parallelism (Param::ep_size = lanes): every micro-batch gets a zeroed [lanes · rows, ...] buffer, each lane
// is summed over the micro-batches canonically, then the lanes canonically into home. With lanes and micro-batches
// powers of two that is the canonical sum over the lane-major list of all lanes × micro-batches: ep 1's order over
// its data-parallel ranks (lane = source rank).
TEST(OrderedGradAccumulator, ExpertLanesAreSummedPerLaneThenAcrossLanes) {
  const std::int64_t rows = 3, width = 5, n = rows * width;
  for (int lanes : {2, 3, 4}) {
    for (int microbatches : {1, 2, 3, 4}) {
      SCOPED_TRACE(::testing::Message() << lanes << " lanes, " << microbatches << " micro-batches");
      auto p = std::make_shared<layers::Param>();
      p->name = "experts.w";
      p->value = Tensor::zeros({rows, width}, DType::kF32, MemoryCategory::kParameters, cpu_allocator());
      p->grad = Tensor::zeros({rows, width}, DType::kF32, MemoryCategory::kGradients, cpu_allocator());
      p->ep_size = lanes;
      const Tensor home = p->grad;
      OrderedGradAccumulator acc({p}, microbatches);
      // terms[l · microbatches + mb]: lane l's contribution in micro-batch mb.
      const auto terms = contributions(lanes * microbatches, n, 7u * static_cast<unsigned>(lanes) + microbatches);
      for (int mb = 0; mb < microbatches; ++mb) {
        acc.begin_microbatch(mb);
        ASSERT_EQ(p->grad.numel(), lanes * n) << "no lane buffer";
        ASSERT_NE(p->grad.raw_data(), home.raw_data());
        for (std::int64_t i = 0; i < lanes * n; ++i) ASSERT_EQ(p->grad.data<float>()[i], 0.0f) << "not zeroed";
        float* g = p->grad.data<float>();
        for (int l = 0; l < lanes; ++l) {
          for (std::int64_t i = 0; i < n; ++i) {
            g[l * n + i] += terms[static_cast<std::size_t>(l * microbatches + mb)][static_cast<std::size_t>(i)];
          }
        }
        acc.param_done(*p);
      }
      ASSERT_EQ(p->grad.raw_data(), home.raw_data()) << "Param::grad not restored to its own tensor";
      ASSERT_EQ(p->grad.shape(), home.shape());
      std::int64_t wrong = 0, wrong_flat = 0;
      const bool powers = (lanes & (lanes - 1)) == 0 && (microbatches & (microbatches - 1)) == 0;
      for (std::int64_t i = 0; i < n; ++i) {
        std::vector<float> lane_totals, flat;
        for (int l = 0; l < lanes; ++l) {
          std::vector<float> column;
          for (int mb = 0; mb < microbatches; ++mb) {
            column.push_back(terms[static_cast<std::size_t>(l * microbatches + mb)][static_cast<std::size_t>(i)]);
            flat.push_back(column.back());
          }
          lane_totals.push_back(testing::canonical_sum_reference(column, 0, column.size()));
        }
        const float want = testing::canonical_sum_reference(lane_totals, 0, lane_totals.size());
        const float got = home.data<float>()[i];
        wrong += std::memcmp(&want, &got, sizeof got) != 0;
        const float flat_sum = testing::canonical_sum_reference(flat, 0, flat.size());
        wrong_flat += powers && std::memcmp(&flat_sum, &got, sizeof got) != 0;
      }
      EXPECT_EQ(wrong, 0);
      EXPECT_EQ(wrong_flat, 0) << "differs from the canonical sum over all lanes × micro-batches";
    }
  }
}

TEST(OrderedGradAccumulator, OutOfOrderOrUnfinishedMicrobatchesAreBugs) {
  auto p = make_param("w", 3);
  OrderedGradAccumulator acc({p}, 4);
  acc.begin_microbatch(0);
  EXPECT_THROW(acc.begin_microbatch(1), InternalError);  // micro-batch 0 never reported p
  acc.param_done(*p);
  EXPECT_THROW(acc.param_done(*p), InternalError);  // twice in one micro-batch
  EXPECT_THROW(acc.begin_microbatch(2), InternalError);  // skips 1
  auto stranger = make_param("other", 3);
  EXPECT_THROW(acc.param_done(*stranger), InternalError);
}

}  // namespace
}  // namespace cleave::pipeline::ordered_grad_accumulator_test

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

namespace cleave::pipeline {
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
}  // namespace cleave::pipeline

// Synthetic tasks: the token chain follows its successor table and is learnable down to ln(branching)
// (an empirical bigram fitted on training batches reaches it on evaluation batches); the clusters are
// separable by a nearest-centre rule but not trivially.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "data_test_util.hpp"
#include "engine/train/data/make_data_source.hpp"
#include "engine/train/data/synthetic.hpp"

namespace cleave::train::synthetic_test {
namespace {

TEST(Synthetic, TokensFollowTheChain) {
  const SyntheticTokenSource source(256, 32, 1234, Split::kTrain);
  EXPECT_NEAR(source.entropy_floor(), std::log(4.0), 1e-12);
  const Batch b = source.next_batch(3, 0, BatchLayout{8, 8, 0, 1}, cpu_allocator());
  const auto* in = b.inputs.data<std::int32_t>();
  const auto* tg = b.targets.data<std::int32_t>();
  for (int r = 0; r < 8; ++r) {
    for (int t = 0; t < 32; ++t) {
      const std::int32_t* next = source.successors(in[r * 32 + t]);
      ASSERT_TRUE(std::find(next, next + 4, tg[r * 32 + t]) != next + 4);
      if (t + 1 < 32) {
        ASSERT_EQ(in[r * 32 + t + 1], tg[r * 32 + t]);
      }
    }
  }
}

TEST(Synthetic, TokenTaskIsLearnableToTheFloor) {
  const std::int64_t vocab = 64;
  const SyntheticTokenSource train(vocab, 32, 7, Split::kTrain);
  const SyntheticTokenSource eval(vocab, 32, 7, Split::kEval);
  std::map<std::pair<int, int>, double> counts;
  std::vector<double> totals(vocab, 0.0);
  for (int step = 0; step < 200; ++step) {
    const Batch b = train.next_batch(step, 0, BatchLayout{8, 8, 0, 1}, cpu_allocator());
    for (int i = 0; i < 8 * 32; ++i) {
      counts[{b.inputs.data<std::int32_t>()[i], b.targets.data<std::int32_t>()[i]}] += 1;
      totals[static_cast<std::size_t>(b.inputs.data<std::int32_t>()[i])] += 1;
    }
  }
  double nll = 0;
  int n = 0;
  for (int step = 0; step < 20; ++step) {
    const Batch b = eval.next_batch(step, 0, BatchLayout{8, 8, 0, 1}, cpu_allocator());
    for (int i = 0; i < 8 * 32; ++i) {
      const int x = b.inputs.data<std::int32_t>()[i], y = b.targets.data<std::int32_t>()[i];
      const double p = (counts[{x, y}] + 0.01) / (totals[static_cast<std::size_t>(x)] + 0.01 * vocab);
      nll -= std::log(p);
      ++n;
    }
  }
  nll /= n;
  EXPECT_LT(nll, std::log(4.0) + 0.05);
  EXPECT_GT(nll, std::log(4.0) - 0.05);
  EXPECT_LT(nll, std::log(static_cast<double>(vocab)) - 2.0);
}

TEST(Synthetic, ClustersAreSeparableButNotTrivially) {
  const SyntheticClassSource train(Shape{64}, 10, 5, Split::kTrain);
  const SyntheticClassSource eval(Shape{64}, 10, 5, Split::kEval);
  int correct = 0, total = 0;
  std::vector<int> per_class(10, 0);
  for (int step = 0; step < 50; ++step) {
    const Batch b = eval.next_batch(step, 0, BatchLayout{20, 20, 0, 1}, cpu_allocator());
    for (int r = 0; r < 20; ++r) {
      const float* x = b.inputs.data<float>() + r * 64;
      int best = -1;
      double best_d = 1e300;
      for (int c = 0; c < 10; ++c) {
        double d = 0;
        for (int f = 0; f < 64; ++f) d += std::pow(x[f] - train.centre(c)[f], 2);
        if (d < best_d) best_d = d, best = c;
      }
      const int label = b.targets.data<std::int32_t>()[r];
      ++per_class[static_cast<std::size_t>(label)];
      correct += best == label;
      ++total;
    }
  }
  const double accuracy = static_cast<double>(correct) / total;
  EXPECT_GT(accuracy, 0.85);
  EXPECT_LT(accuracy, 0.999);
  for (int count : per_class) EXPECT_GT(count, 60);
}

TEST(Synthetic, DefaultConfigGivesTheTokenTask) {
  const auto c = config::parse_config("{}");
  auto source = make_data_source(c, Split::kTrain);
  EXPECT_NE(dynamic_cast<SyntheticTokenSource*>(source.get()), nullptr);
  EXPECT_EQ(source->sample_shape(), Shape{c.model.gpt.seq_len});
  auto mlp = make_data_source(config::parse_config(R"({"model": {"type": "mlp", "in_features": 20}})"), Split::kEval);
  EXPECT_EQ(mlp->sample_shape(), Shape{20});
  EXPECT_EQ(mlp->input_dtype(), DType::kF32);
}

}  // namespace
}  // namespace cleave::train::synthetic_test

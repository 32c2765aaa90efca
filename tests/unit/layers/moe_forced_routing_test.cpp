// model.forced_routing: every named workload, forced through the real router (layers::route with the
// workload's experts from layers::forced_experts), routes exactly the rows the independent Python oracle
// (benchmarks/moe/oracle.py) says, per (source, destination) ep rank, at ep 2 and 4 and several steps; the
// weights stay the router's scores of the forced experts; bad workload names are refused naming the key.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/core/error.hpp"
#include "layers/moe/forced_routing.hpp"
#include "layers/moe/router.hpp"
#include "partition/ep_costs.hpp"

namespace cleave::layers::moe_forced_routing_test {
namespace {

using partition::ForcedRouting;

// The oracle's JSON for one workload, or an empty value when python3 cannot run it.
nlohmann::json oracle(const std::string& workload, int experts, int top_k, int ep, int tokens, int steps) {
  const std::string command = fmt::format(
      "python3 {}/benchmarks/moe/oracle.py --workload {} --experts {} --top-k {} --ep {} --tokens {} --d-model 8 "
      "--steps {} --json 2>&1",
      CLEAVE_SOURCE_DIR, workload, experts, top_k, ep, tokens, steps);
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return {};
  std::string text;
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) text += buffer;
  if (::pclose(pipe) != 0) {
    ADD_FAILURE() << command << " failed: " << text;
    return {};
  }
  return nlohmann::json::parse(text);
}

std::vector<float> random_logits(std::int64_t tokens, std::int64_t experts, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> l(static_cast<std::size_t>(tokens * experts));
  for (float& v : l) v = normal(rng);
  return l;
}

TEST(MoeForcedRouting, EveryWorkloadMatchesTheOracle) {
  if (std::system("python3 -c pass > /dev/null 2>&1") != 0) GTEST_SKIP() << "python3 not found";
  constexpr int kExperts = 8, kTopK = 2, kTokens = 48, kSteps = 3;
  for (const int ep : {2, 4}) {
    for (const std::string& workload :
         std::vector<std::string>{"uniform", "zipf", "one_expert", "empty_rank:" + std::to_string(ep), "moving_hot"}) {
      const nlohmann::json expected = oracle(workload, kExperts, kTopK, ep, kTokens, kSteps);
      ASSERT_EQ(expected.size(), static_cast<std::size_t>(kSteps)) << workload;
      RouterOptions o;
      o.experts = kExperts;
      o.top_k = kTopK;
      o.forced = partition::forced_routing(workload, kExperts, kTopK);
      for (int step = 0; step < kSteps; ++step) {
        // Each source rank routes its own tokens (different logits: the choice must not depend on them).
        std::vector<std::vector<std::int32_t>> slots(static_cast<std::size_t>(ep));
        for (int q = 0; q < ep; ++q) {
          const auto logits = random_logits(kTokens, kExperts, static_cast<std::uint64_t>(100 * step + q));
          const auto forced = forced_experts(o.forced, step, kTokens, kExperts, kTopK);
          const Routing r = route(logits, {}, o, forced);
          slots[static_cast<std::size_t>(q)] = r.expert;
          // The weights are the router's softmax scores of the forced experts, normalised.
          for (std::int64_t n = 0; n < kTokens; n += 7) {
            const double a = r.scores[static_cast<std::size_t>(n * kExperts + r.expert[n * kTopK])];
            const double b = r.scores[static_cast<std::size_t>(n * kExperts + r.expert[n * kTopK + 1])];
            EXPECT_NEAR(r.weight[static_cast<std::size_t>(n * kTopK)], a / (a + b), 1e-6);
          }
        }
        const partition::EpTraffic t = partition::ep_traffic(slots, kExperts, ep);
        const auto& want = expected[static_cast<std::size_t>(step)];
        for (int q = 0; q < ep; ++q) {
          for (int d = 0; d < ep; ++d) {
            EXPECT_EQ(t.at(q, d), want["dispatch_rows"][q][d].get<std::int64_t>())
                << workload << " ep " << ep << " step " << step << " rows " << q << " -> " << d;
          }
          EXPECT_EQ(t.computed(q), want["computed_rows"][q].get<std::int64_t>()) << workload;
        }
        if (workload.starts_with("empty_rank")) {
          EXPECT_EQ(t.computed(ep - 1), 0) << workload;
        }
        if (workload == "one_expert") {
          EXPECT_EQ(t.computed(0), ep * kTokens * kTopK);
        }
      }
    }
  }
}

TEST(MoeForcedRouting, MovingHotExpertMovesEveryStep) {
  const ForcedRouting f = partition::forced_routing("moving_hot", 8, 2);
  for (int step : {0, 1, 9}) {
    const auto e = forced_experts(f, step, 5, 8, 2);
    for (int n = 0; n < 5; ++n) {
      EXPECT_EQ(e[static_cast<std::size_t>(2 * n)], step % 8);
      EXPECT_NE(e[static_cast<std::size_t>(2 * n + 1)], step % 8);  // distinct
    }
  }
  EXPECT_TRUE(forced_experts(partition::forced_routing("", 8, 2), 0, 5, 8, 2).empty());
}

TEST(MoeForcedRouting, BadWorkloadsNameTheKey) {
  for (const char* bad : {"hot", "uniform:2", "empty_rank:3", "empty_rank:1", "empty_rank:x", "empty_rank:16"}) {
    try {
      partition::forced_routing(bad, 8, 2);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const ConfigKeyError& e) {
      EXPECT_NE(std::string(e.what()).find("model.forced_routing"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(partition::forced_routing("empty_rank", 2, 2), ConfigKeyError);  // 1 expert left for top-2
  EXPECT_EQ(partition::forced_routing("empty_rank:8", 8, 2).parts, 8);           // 7 left for top-2
}

}  // namespace
}  // namespace cleave::layers::moe_forced_routing_test

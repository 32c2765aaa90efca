// The plan search: never ranks a plan over the cap; tp only where heads and d_ff divide; dp only where the
// global batch divides; a search whose best plan is known by hand (free communication: the best step is
// the total compute over the world, with no bubble); profile files refused with the key at fault; the
// smallest cap that admits a plan admits exactly the plans at or under it; a refused candidate names its key with
// where it came from.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "engine/core/error.hpp"
#include "engine/planner/hardware_profile.hpp"
#include "engine/planner/plan_search.hpp"
#include "engine/run_plan/memory_plan.hpp"
#include "engine/run_plan/plan.hpp"
#include "partition/families/gpt.hpp"
#include "support/scratch_dir_test.hpp"

namespace cleave::planner::plan_search_test {
namespace {

namespace fs = std::filesystem;

class PlanSearch : public testing::ScratchDirTest {
 protected:
  PlanSearch() : ScratchDirTest("cleave_plan_test_") {}


  std::string tiny_gpt(int n_heads = 4, int global_batch = 8) {
    return write("tiny.json", R"({"model": {"type": "gpt", "vocab_size": 64, "d_model": 48, "n_layers": 4, "n_heads": )" +
                                  std::to_string(n_heads) + R"(, "seq_len": 16},
      "batch": {"global_batch_size": )" + std::to_string(global_batch) + R"(},
      "optimizer": {"type": "adamw"}, "data": {"type": "synthetic"}})");
  }

  // Communication and the optimizer are (almost) free: only compute costs time.
  static HardwareProfile free_links() {
    HardwareProfile p;
    p.name = "test";
    p.source = "test";
    p.flops_f32 = p.flops_bf16 = 1e9;
    p.memory_bandwidth_Bps = 1e30;
    p.intra_node = p.inter_node = Link{1e-30, 1e30};
    p.ranks_per_node = 8;
    return p;
  }

};

TEST_F(PlanSearch, NeverRanksAPlanOverTheCap) {
  const std::string config = tiny_gpt();
  SearchOptions options{4, 0};
  const SearchResult all = search_plans(config, {}, free_links(), options);
  ASSERT_FALSE(all.ranked.empty());
  std::int64_t smallest = all.ranked.front().peak_bytes, largest = 0;
  for (const auto& e : all.ranked) {
    smallest = std::min(smallest, e.peak_bytes);
    largest = std::max(largest, e.peak_bytes);
  }
  ASSERT_LT(smallest, largest);
  options.memory_limit = (smallest + largest) / 2;
  const SearchResult capped = search_plans(config, {}, free_links(), options);
  ASSERT_FALSE(capped.ranked.empty());
  for (const auto& e : capped.ranked) EXPECT_LE(e.peak_bytes, options.memory_limit) << e.choice.layout();
  std::size_t over = 0;
  for (const auto& e : capped.rejected) {
    if (e.valid) {
      EXPECT_GT(e.peak_bytes, options.memory_limit);
      EXPECT_NE(e.reason.find("> cap"), std::string::npos) << e.reason;
      ++over;
    }
  }
  EXPECT_EQ(capped.ranked.size() + over, all.ranked.size());
  options.memory_limit = smallest - 1;
  EXPECT_TRUE(search_plans(config, {}, free_links(), options).ranked.empty());
}

TEST_F(PlanSearch, TensorParallelOnlyWhereHeadsDivideAndDataParallelOnlyWhereTheBatchDivides) {
  // 6 heads, d_ff 192: tp 1, 2, 3, 6 divide both; on 4 ranks tp is 1 or 2. Global batch 6: dp 4 is refused.
  const SearchResult r = search_plans(tiny_gpt(6, 6), {}, free_links(), SearchOptions{4, 0});
  std::set<int> tps, dps;
  for (const auto& e : r.ranked) {
    tps.insert(e.choice.tp);
    dps.insert(e.choice.dp);
    EXPECT_EQ(e.choice.tp * e.choice.cp * e.choice.pp * e.choice.dp, 4);
    EXPECT_EQ(6 % (e.choice.dp * e.choice.micro_batch), 0);
  }
  EXPECT_EQ(tps, (std::set<int>{1, 2}));
  EXPECT_EQ(dps.count(4), 0u);
  bool dp4_reason = false;
  for (const auto& e : r.rejected) dp4_reason |= e.reason.find("not divisible by dp 4") != std::string::npos;
  EXPECT_TRUE(dp4_reason);
}

// A candidate the engine refuses names the refused key with where it came from, as `cleave train` does: a key the
// candidate changed as its --set, one that keeps the config's value (cleave simulate --config: the config's own plan)
// as the config file's. The 4-layer GPT has 8 blocks; 2 pp ranks x 8 virtual stages make 16 stages.
TEST_F(PlanSearch, ARefusedCandidateNamesItsKeyAndWhereItCameFrom) {
  const std::string config = tiny_gpt();
  PlanChoice deep;
  deep.pp = 2;
  deep.virtual_stages = 8;
  deep.schedule = "interleaved_1f1b";
  deep.global_batch = 8;
  const PlanEstimate searched = estimate_plan(config, {}, deep, free_links(), SearchOptions{2, 0});
  ASSERT_FALSE(searched.valid);
  EXPECT_EQ(searched.reason.rfind("--set parallel.virtual_pipeline_stages=8: parallel.virtual_pipeline_stages: 16 "
                                  "pipeline stages (pipeline_model_parallel_size 2 x virtual stages 8) but the model "
                                  "has only 8 blocks",
                                  0),
            0u)
      << searched.reason;
  const std::string own = write("deep.json", R"({"model": {"type": "gpt", "vocab_size": 64, "d_model": 48,
      "n_layers": 4, "n_heads": 4, "seq_len": 16}, "batch": {"global_batch_size": 8}, "data": {"type": "synthetic"},
      "parallel": {"pipeline_model_parallel_size": 2, "virtual_pipeline_stages": 8, "schedule": "interleaved_1f1b"}})");
  const PlanEstimate simulated =
      estimate_plan(own, {}, choice_of_config(own, {}, 2), free_links(), SearchOptions{2, 0});
  ASSERT_FALSE(simulated.valid);
  EXPECT_EQ(simulated.reason.rfind("config " + own + ": parallel.virtual_pipeline_stages: 16 pipeline stages", 0), 0u)
      << simulated.reason;
}

TEST_F(PlanSearch, WithFreeCommunicationTheBestPlanSplitsComputeEvenlyWithNoBubble) {
  const std::string config = tiny_gpt();
  const SearchResult r = search_plans(config, {}, free_links(), SearchOptions{2, 0});
  ASSERT_FALSE(r.ranked.empty());
  // By hand: one rank computes C per step (pp1 dp1 on world 1); on 2 ranks the best a plan can do is C / 2:
  // dp2 or tp2 (free collectives) have no bubble and split every block evenly.
  const SearchResult one = search_plans(config, {}, free_links(), SearchOptions{1, 0});
  ASSERT_FALSE(one.ranked.empty());
  const double total = one.ranked.front().step_s;
  const PlanEstimate& best = r.ranked.front();
  EXPECT_EQ(best.choice.pp, 1) << best.choice.layout() << " " << best.choice.schedule;
  EXPECT_NEAR(best.step_s, total / 2, 1e-9 * total);
  EXPECT_EQ(best.bubble, 0.0);
  // Every pipelined plan pays a bubble, so ranks below it.
  for (const auto& e : r.ranked) {
    if (e.choice.pp > 1) {
      EXPECT_GT(e.bubble, 0.0);
      EXPECT_GT(e.step_s, best.step_s);
    }
  }
}

TEST_F(PlanSearch, FullRecomputationPaysTheRerunForwardsAllReduces) {
  // Every collective costs its latency, α for a reduce-scatter or an all-gather, 2α for an all-reduce (tp2): per
  // micro-batch a 4-layer gpt at tp2 all-reduces 2 per block in F and 2 in I, the embedding 1 in F, the lm head 1 in I,
  // the loss 2 in F; full recomputation reruns each block's forward inside I, its 2 all-reduces included: (6L + 4)
  // against (4L + 4) all-reduces. Under sequence parallelism (micro-batch 1) a block posts 4 one-phase collectives in
  // F, 4 in I and 2 in W, the embedding 2, the head 3, the loss its 2 all-reduces: 10L + 5 + 2 × 2 latencies, and the
  // rerun the blocks' 4L more.
  const std::string config = tiny_gpt();
  HardwareProfile p = free_links();
  p.intra_node = Link{1e-3, 1e30};
  const SearchResult r = search_plans(config, {}, p, SearchOptions{2, 0});
  double none[2] = {0, 0}, full[2] = {0, 0};
  for (const auto& e : r.ranked) {
    if (e.choice.tp != 2 || e.choice.micro_batch != 1) continue;
    using partition::Recompute;
    const int sp = e.choice.sequence_parallel ? 1 : 0;
    if (e.choice.recompute == Recompute::kNone) none[sp] += e.breakdown.tp_comm_s;
    if (e.choice.recompute == Recompute::kFull) full[sp] += e.breakdown.tp_comm_s;
  }
  ASSERT_GT(none[0], 0);
  ASSERT_GT(none[1], 0);
  EXPECT_NEAR(full[0] / none[0], (6.0 * 4 + 4) / (4.0 * 4 + 4), 1e-9);
  EXPECT_NEAR(full[1] / none[1], (14.0 * 4 + 5 + 4) / (10.0 * 4 + 5 + 4), 1e-9);
}

// The tp term prices what the layers post (partition::tp_block_comm, proven against them under mpiexec by
// tests/support/tp_collectives.hpp), at one latency per one-phase collective and two per all-reduce (tp2, free
// bandwidth), global batch 8:
// - sequence parallelism posts its gathers and scatters once per sample: a gpt micro-batch of 2 pays 2 × the 45
//   one-phase collectives' latencies (4 blocks × 10, the embedding's 2, the head's 3) and once its loss's 2
//   all-reduces, over 4 micro-batches: 4 × (90 + 4); at micro-batch 1, 8 × (45 + 4);
// - a moe block with a shared expert and Qwen3's q/k norms all-reduces 3 times in F (the attention's output, the
//   routed experts' and the shared expert's), 4 times in I (the combine weights' gradient, the routed and the shared
//   experts' input gradients, the attention's), twice in W (the q and k norms' weight gradients): 2 blocks × 9, the
//   embedding's 1, the head's 1 and the loss's 2, 22 all-reduces a micro-batch.
TEST_F(PlanSearch, TensorParallelPricesWhatTheLayersPost) {
  HardwareProfile p = free_links();
  const double latency = 1e-3;
  p.intra_node = p.inter_node = Link{latency, 1e30};
  const SearchOptions two{2, 0};
  using partition::Recompute;
  const std::string gpt = tiny_gpt();
  for (const int micro : {1, 2}) {
    const PlanEstimate sp = estimate_plan(gpt, {}, PlanChoice{2, 1, 1, 1, "1f1b", micro, 0, Recompute::kNone, 8, true},
                                          p, two);
    ASSERT_TRUE(sp.valid) << sp.reason;
    EXPECT_NEAR(sp.breakdown.tp_comm_s, 8.0 / micro * (45 * micro + 2 * 2) * latency, 1e-9) << "micro " << micro;
  }
  const std::string moe = write("moe.json", R"({"model": {"type": "moe", "vocab_size": 64, "d_model": 32,
      "n_layers": 2, "n_heads": 4, "seq_len": 16, "ffn_hidden_size": 32, "n_experts": 4, "top_k": 2,
      "n_shared_experts": 1, "qk_norm": true}, "batch": {"global_batch_size": 8}, "optimizer": {"type": "adamw"},
      "data": {"type": "synthetic"}})");
  const PlanEstimate tp = estimate_plan(moe, {}, PlanChoice{2, 1, 1, 1, "1f1b", 1, 0, Recompute::kNone, 8, false}, p,
                                        two);
  ASSERT_TRUE(tp.valid) << tp.reason;
  EXPECT_NEAR(tp.breakdown.tp_comm_s, 8 * 22 * 2 * latency, 1e-9);
}

TEST_F(PlanSearch, ProfilesAreCheckedKeyByKey) {
  EXPECT_THROW(load_profile((dir_ / "missing.json").string()), Error);
  const std::string good = R"({"format": "cleave-hardware-profile", "name": "x", "source": "a datasheet",
    "device_type": "cuda", "sustained_gemm_tflops": {"f32": 10, "bf16": 100}, "memory_bandwidth_GBps": 1000,
    "intra_node": {"latency_us": 5, "bandwidth_GBps": 300}, "inter_node": {"latency_us": 10, "bandwidth_GBps": 25},
    "ranks_per_node": 8, "device_memory_GiB": 80})";
  const HardwareProfile p = load_profile(write("good.json", good));
  EXPECT_DOUBLE_EQ(p.flops_bf16, 100e12);
  EXPECT_DOUBLE_EQ(p.intra_node.latency_s, 5e-6);
  EXPECT_EQ(p.device_memory, 80LL << 30);
  auto message = [&](const std::string& text) {
    try {
      load_profile(write("bad.json", text));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::string bad = good;
  bad.replace(bad.find("\"bf16\": 100"), 11, "\"bf16\": -1");
  EXPECT_NE(message(bad).find("'bf16' must be a number > 0"), std::string::npos) << message(bad);
  bad = good;
  bad.replace(bad.find("\"source\": \"a datasheet\""), 23, "\"source\": \"\"");
  EXPECT_NE(message(bad).find("'source' must say where"), std::string::npos) << message(bad);
  EXPECT_NE(message("{\"format\": \"x\"}").find("cleave-hardware-profile"), std::string::npos);
  EXPECT_NE(message("{nope").find("not valid JSON"), std::string::npos);
  // The shipped profiles load.
  for (const char* shipped : {"a100_80gb_sxm.json", "h100_sxm.json"}) {
    const HardwareProfile s = load_profile(std::string(CLEAVE_SOURCE_DIR) + "/profiles/" + shipped);
    EXPECT_GT(s.flops_bf16, s.flops_f32) << shipped;
    EXPECT_EQ(s.ranks_per_node, 8) << shipped;
    EXPECT_TRUE(s.has_roofline()) << shipped;
    EXPECT_LT(s.flops_bf16, s.peak_flops_bf16) << shipped;
    // It writes back to what it read.
    EXPECT_EQ(profile_to_json(load_profile(write("again.json", profile_to_json(s).dump()))), profile_to_json(s)) << shipped;
  }
}

TEST_F(PlanSearch, RooflinePricesEachGemmAndTheStreamedBytes) {
  const std::string text = R"({"format": "cleave-hardware-profile", "name": "r", "source": "test",
    "device_type": "cuda", "sustained_gemm_tflops": {"f32": 10, "bf16": 100}, "memory_bandwidth_GBps": 1000,
    "peak_tflops": {"f32": 20, "bf16": 200}, "gemm_efficiency": [[1e8, 0.2], [1e10, 0.8]],
    "intra_node": {"latency_us": 5, "bandwidth_GBps": 300}, "inter_node": {"latency_us": 10, "bandwidth_GBps": 25},
    "ranks_per_node": 8, "device_memory_GiB": 80})";
  const HardwareProfile p = load_profile(write("roof.json", text));
  ASSERT_TRUE(p.has_roofline());
  EXPECT_DOUBLE_EQ(p.gemm_efficiency_at(1e6), 0.2);   // flat below the first point
  EXPECT_DOUBLE_EQ(p.gemm_efficiency_at(1e12), 0.8);  // and beyond the last
  EXPECT_NEAR(p.gemm_efficiency_at(1e9), 0.5, 1e-12);  // halfway in log FLOPs
  // A big square GEMM is compute bound: 2·4096³ FLOPs at 0.8 x 200 TFLOP/s.
  partition::PassWork big;
  big.gemms.push_back({4096, 4096, 4096});
  EXPECT_NEAR(p.roofline_seconds(big, true), 2.0 * 4096 * 4096 * 4096 / (0.8 * 200e12), 1e-15);
  // A thin one (k = 8) is memory bound: (mk + kn + mn) bf16 elements over 1000 GB/s.
  partition::PassWork thin;
  thin.gemms.push_back({4096, 4096, 8});
  thin.stream_bytes = 1e6;
  EXPECT_NEAR(p.roofline_seconds(thin, true), ((4096.0 * 8 * 2 + 4096.0 * 4096) * 2 + 1e6) / 1e12, 1e-15);
  auto message = [&](const std::string& replacement) {
    std::string bad = text;
    bad.replace(bad.find("[[1e8, 0.2], [1e10, 0.8]]"), 25, replacement);
    try {
      load_profile(write("bad_roof.json", bad));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message("[[1e10, 0.2], [1e8, 0.8]]").find("increasing order"), std::string::npos);
  EXPECT_NE(message("[[1e8, 1.5]]").find("fraction in (0, 1]"), std::string::npos);
  EXPECT_NE(message("[]").find("non-empty list"), std::string::npos);
  EXPECT_NE(message("[[1e8]]").find("is not [flops per GEMM, fraction of peak]"), std::string::npos);
}

TEST_F(PlanSearch, ShippedA100ProfilePricesSmallModelsLowerThanTheSustainedRate) {
  // The roofline charges attention's softmax and T x T GEMMs by bytes: a small-hidden GPT gets a lower
  // FLOP/s than a large one on the same profile (what Megatron-LM's Table 1 shows: 44% vs 52% of peak).
  const HardwareProfile a100 = load_profile(std::string(CLEAVE_SOURCE_DIR) + "/profiles/a100_80gb_sxm.json");
  auto flops_per_s = [&](std::int64_t d, std::int64_t heads) {
    partition::GptConfig c;
    c.vocab_size = 1024;
    c.d_model = d;
    c.n_layers = 1;
    c.n_heads = heads;
    c.seq_len = 2048;
    const partition::ModelSpec spec = partition::make_gpt_spec(c);
    const partition::BlockWork w = partition::block_work(spec.blocks[1], DType::kBF16, partition::Recompute::kNone, 1, 1);
    const double flops = w.forward.gemm_flops() + w.input_grad.gemm_flops() + w.weight_grad.gemm_flops();
    return flops / (a100.roofline_seconds(w.forward, true) + a100.roofline_seconds(w.input_grad, true) +
                    a100.roofline_seconds(w.weight_grad, true));
  };
  const double small = flops_per_s(1024, 16), large = flops_per_s(8192, 64);
  EXPECT_LT(small, 0.8 * large);
  EXPECT_LT(large, a100.peak_flops_bf16 * a100.gemm_efficiency.back().second);
  EXPECT_GT(large, 0.8 * a100.peak_flops_bf16 * a100.gemm_efficiency.back().second);
}

TEST_F(PlanSearch, AttentionProbabilitiesCostTheirPassesAndEveryScore) {
  // --attention probabilities_dropout on the shipped A100 profile, one rank, 8 micro-batches of 1 sample: per
  // attention block and micro-batch, n = heads x T x T = 4 x 16 x 16 f32 elements; the forward streams
  // n (2b + 2b + 1) bytes, the backward n (3b + 2b + 1) bytes, and the products run over all 16 keys (forward S,
  // P·V; backward dP, dV, dQ, dK) instead of the memory-efficient kernel's mean 8.5 visible keys (16·17/2 causal
  // pairs over 16 rows; its backward reruns S: 5 products).
  HardwareProfile a100 = load_profile(std::string(CLEAVE_SOURCE_DIR) + "/profiles/a100_80gb_sxm.json");
  a100.sm_count = 0;  // the products' size curve alone (the fused kernel's have no wave term; the library's would)
  const std::string config = tiny_gpt();
  PlanChoice c;
  c.global_batch = 8;
  SearchOptions options{1, 0};
  const PlanEstimate plain = estimate_plan(config, {}, c, a100, options);
  options.attention = partition::AttentionKind::kProbabilitiesDropout;
  const PlanEstimate stored = estimate_plan(config, {}, c, a100, options);
  ASSERT_TRUE(plain.valid && stored.valid) << plain.reason << stored.reason;
  const double n = 4.0 * 16 * 16, b = 4, bw = a100.memory_bandwidth_Bps;
  const double keys = 16.0 * 17 / 2 / 16;
  const auto gemm_s = [&](std::vector<partition::Gemm> gemms) {
    partition::PassWork p;
    p.gemms = std::move(gemms);
    return a100.roofline_seconds(p, false);
  };
  const partition::Gemm qk{16, 16, 12, 4}, pv{16, 12, 16, 4}, qk_causal{16, keys, 12, 4}, pv_causal{16, 12, keys, 4};
  // The products in forward and input_grad, the scores' bytes in elementwise, the extra kernels in kernel_launch: F
  // launches S, softmax, dropout, P·V (4) for the fused kernel's 1; I dropout's and softmax's gradients and dP, dV,
  // dQ, dK (6) for its 2.
  const double forward_gemms = gemm_s({qk, pv}) - gemm_s({qk_causal, pv_causal});
  const double backward_gemms = gemm_s({qk, pv, pv, pv}) - gemm_s({qk_causal, qk_causal, pv_causal, pv_causal, pv_causal});
  const double forward_bytes = n * (4 * b + 1) / bw, backward_bytes = n * (5 * b + 1) / bw;
  const double forward_launch = 3 * a100.kernel_launch_s, backward_launch = 4 * a100.kernel_launch_s;
  ASSERT_GT(a100.kernel_launch_s, 0.0);
  const double forward = forward_gemms + forward_bytes + forward_launch;
  const double backward = backward_gemms + backward_bytes + backward_launch;
  const double blocks = 4, micro_batches = 8;
  EXPECT_NEAR(stored.breakdown[StepTerm::kForward] - plain.breakdown[StepTerm::kForward],
              blocks * micro_batches * forward_gemms, 1e-9 * plain.step_s);
  EXPECT_NEAR(stored.breakdown[StepTerm::kInputGrad] - plain.breakdown[StepTerm::kInputGrad],
              blocks * micro_batches * backward_gemms, 1e-9 * plain.step_s);
  EXPECT_NEAR(stored.breakdown[StepTerm::kElementwise] - plain.breakdown[StepTerm::kElementwise],
              blocks * micro_batches * (forward_bytes + backward_bytes), 1e-9 * plain.step_s);
  EXPECT_NEAR(stored.breakdown[StepTerm::kKernelLaunch] - plain.breakdown[StepTerm::kKernelLaunch],
              blocks * micro_batches * (forward_launch + backward_launch), 1e-9 * plain.step_s);
  EXPECT_NEAR(stored.step_s - plain.step_s, blocks * micro_batches * (forward + backward), 1e-9 * plain.step_s);
  EXPECT_GT(stored.step_s, plain.step_s);
  // The stored probabilities and dropout output and mask are held from F to I: n (2b + 1) bytes more per block.
  EXPECT_GT(stored.peak_bytes, plain.peak_bytes);
  // Under recomputation nothing more is held, and the rerun repeats the forward passes inside I.
  c.recompute = partition::Recompute::kSelective;
  const PlanEstimate rerun = estimate_plan(config, {}, c, a100, options);
  options.attention = partition::AttentionKind::kMemoryEfficient;
  const PlanEstimate rerun_plain = estimate_plan(config, {}, c, a100, options);
  EXPECT_EQ(rerun.peak_bytes, rerun_plain.peak_bytes);
  EXPECT_NEAR(rerun.breakdown[StepTerm::kRecompute] - rerun_plain.breakdown[StepTerm::kRecompute],
              blocks * micro_batches * forward_gemms, 1e-9 * plain.step_s);
  EXPECT_NEAR(rerun.step_s - rerun_plain.step_s, blocks * micro_batches * (2 * forward + backward), 1e-9 * plain.step_s);
  // The kind's names round trip; an unknown one is refused.
  for (auto k : {partition::AttentionKind::kMemoryEfficient, partition::AttentionKind::kProbabilities,
                 partition::AttentionKind::kProbabilitiesDropout}) {
    EXPECT_EQ(partition::attention_kind_from(partition::attention_kind_name(k)), k);
  }
  EXPECT_FALSE(partition::attention_kind_from("flash").has_value());
}

// A stored-probabilities kind is an input of the memory plan (estimate_rank_memory's `attention`), not a patch on
// its activations: the planner's peak is the plan's own total, which, under context parallelism, counts the cp
// exchange's share above the activation peak from the grown walk. The rule, written out: every attention block keeps
// n·b more from F to I per micro-batch (n = heads x T x T / cp score elements of b bytes; with dropout n(3b + 1)),
// all four held at the tiny gpt's activation peak (the head's and loss's backward), so the activations grow by
// 4 n b; the total by no more than that (the exchange buffers may now fit under the grown peak).
TEST_F(PlanSearch, AttentionProbabilitiesAreAnInputOfTheMemoryPlan) {
  const HardwareProfile a100 = load_profile(std::string(CLEAVE_SOURCE_DIR) + "/profiles/a100_80gb_sxm.json");
  const std::string path = tiny_gpt();
  for (const auto comm : {config::ContextParallelComm::kRing, config::ContextParallelComm::kAllToAll}) {
    PlanChoice c;
    c.global_batch = 8;
    c.cp = 2;
    c.cp_comm = comm;
    config::RunConfig config = c.apply_to(config::load_config(path));
    config.resolve(2);
    const run_plan::Plan plan =
        run_plan::make_plan(config, static_cast<int>(config.resolved_batch().gradient_accumulation_steps), 0);
    SearchOptions options{2, 0};
    const run_plan::MemoryPlan plain = run_plan::estimate_rank_memory(plan, config, 0);
    ASSERT_GT(plain.cp_exchange, 0);
    for (const auto kind : {partition::AttentionKind::kProbabilities, partition::AttentionKind::kProbabilitiesDropout}) {
      SCOPED_TRACE(std::string(partition::attention_kind_name(kind)) + (comm == config::ContextParallelComm::kRing ? " ring" : " all_to_all"));
      options.attention = kind;
      const PlanEstimate e = estimate_plan(path, {}, c, a100, options);
      ASSERT_TRUE(e.valid) << e.reason;
      const run_plan::MemoryPlan stored = run_plan::estimate_rank_memory(plan, config, 0, 0, kind);
      EXPECT_EQ(e.peak_bytes, stored.total());
      const std::int64_t n = 4 * 16 * 16 / 2, b = 4;
      const std::int64_t per_block = kind == partition::AttentionKind::kProbabilities ? n * b : n * (3 * b + 1);
      const std::int64_t grown = stored.bytes[static_cast<std::size_t>(MemoryCategory::kActivations)] -
                                 plain.bytes[static_cast<std::size_t>(MemoryCategory::kActivations)];
      EXPECT_EQ(grown, 4 * per_block);
      EXPECT_LE(stored.total() - plain.total(), grown);
      EXPECT_GT(stored.total(), plain.total());
      std::printf("[ memory ] cp2 %s %s: activations +%lld B, total %lld -> %lld B (+%lld), transients above the "
                  "activations %lld -> %lld B\n",
                  comm == config::ContextParallelComm::kRing ? "ring" : "all_to_all",
                  std::string(partition::attention_kind_name(kind)).c_str(), static_cast<long long>(grown),
                  static_cast<long long>(plain.total()), static_cast<long long>(stored.total()),
                  static_cast<long long>(stored.total() - plain.total()),
                  static_cast<long long>(plain.transients_above_activations),
                  static_cast<long long>(stored.transients_above_activations));
    }
  }
}

TEST_F(PlanSearch, NamedUnfusedAttentionKernelPricesTheScoresAtItsPublishedRate) {
  // --attention probabilities_dropout --attention-kernel std (a bf16 run) on the A100 profile given a kernel "std" at
  // head dim 12: per attention block and micro-batch (4 heads, T 16, d 12) the scores, softmax and products cost
  // 4·T²·d·heads FLOPs at its forward rate without the mask (2 GFLOP/s: the unfused path computes every score) in F
  // and 2.5 times those FLOPs at its backward rate (3 GFLOP/s) in I; dropout's n(2b + 1) bytes per pass and its kernel
  // stay on the roofline; the fused kernel's products (at std's causal rates, as block_work priced them) and its 1 + 2
  // launches are what they replace. A rate faster than the roofline's price of the same kernels does not lower it.
  HardwareProfile a100 = load_profile(std::string(CLEAVE_SOURCE_DIR) + "/profiles/a100_80gb_sxm.json");
  using partition::AttentionMask;
  using partition::AttentionPass;
  a100.attention_rates = partition::AttentionRates(
      {{"std", AttentionPass::kForward, AttentionMask::kNone, 12, {{16, 0.002}}},
       {"std", AttentionPass::kForward, AttentionMask::kCausal, 12, {{16, 1}}},
       {"std", AttentionPass::kBackward, AttentionMask::kNone, 12, {{16, 0.003}}},
       {"std", AttentionPass::kBackward, AttentionMask::kCausal, 12, {{16, 1.5}}},
       {"fast", AttentionPass::kForward, AttentionMask::kNone, 12, {{16, 1000}}},
       {"fast", AttentionPass::kForward, AttentionMask::kCausal, 12, {{16, 1}}},
       {"fast", AttentionPass::kBackward, AttentionMask::kNone, 12, {{16, 1000}}},
       {"fast", AttentionPass::kBackward, AttentionMask::kCausal, 12, {{16, 1.5}}}},
      "test");
  a100.attention_kernel = "std";
  const std::string config = write("bf16.json", R"({"model": {"type": "gpt", "vocab_size": 64, "d_model": 48, "n_layers": 4,
      "n_heads": 4, "seq_len": 16}, "batch": {"global_batch_size": 8}, "optimizer": {"type": "adamw"},
      "device": {"type": "cpu", "precision": "bf16"}, "data": {"type": "synthetic"}})");
  PlanChoice c;
  c.global_batch = 8;
  SearchOptions options{1, 0};
  const PlanEstimate plain = estimate_plan(config, {}, c, a100, options);
  options.attention = partition::AttentionKind::kProbabilitiesDropout;
  const PlanEstimate stored = estimate_plan(config, {}, c, a100, options);
  ASSERT_TRUE(plain.valid && stored.valid) << plain.reason << stored.reason;
  partition::GptConfig g;
  g.vocab_size = 64;
  g.d_model = 48;
  g.n_layers = 4;
  g.n_heads = 4;
  g.seq_len = 16;
  const partition::ProbabilitiesWork w = partition::attention_probabilities_work(
      partition::make_gpt_spec(g).blocks[1], DType::kBF16, partition::AttentionKind::kProbabilitiesDropout, 1, 1);
  const double n = 4.0 * 16 * 16, b = 2, bw = a100.memory_bandwidth_Bps, flops = 4.0 * 16 * 16 * 12 * 4;
  const double dropout_s = n * (2 * b + 1) / bw, launch = a100.kernel_launch_s;
  const double forward = flops / 2e9 + dropout_s + launch - a100.gemm_pass_seconds(w.replaced_forward, true) - launch;
  const double backward =
      2.5 * flops / 3e9 + dropout_s + launch - a100.gemm_pass_seconds(w.replaced_backward, true) - 2 * launch;
  const double blocks = 4, micro_batches = 8;
  EXPECT_NEAR(stored.breakdown[StepTerm::kElementwise] - plain.breakdown[StepTerm::kElementwise],
              blocks * micro_batches * 2 * dropout_s, 1e-9 * plain.step_s);
  EXPECT_NEAR(stored.breakdown[StepTerm::kKernelLaunch] - plain.breakdown[StepTerm::kKernelLaunch],
              -blocks * micro_batches * launch, 1e-9 * plain.step_s);
  EXPECT_NEAR(stored.step_s - plain.step_s, blocks * micro_batches * (forward + backward), 1e-9 * plain.step_s);
  // A rate above what the roofline charges for these tiny products (1000 TFLOP/s) leaves the roofline's price: the
  // same step as a run naming no kernel (the fused products the probabilities replace cancel either way).
  HardwareProfile fast = a100;
  fast.attention_kernel = "fast";
  HardwareProfile unnamed = a100;
  unnamed.attention_kernel = "";
  EXPECT_NEAR(estimate_plan(config, {}, c, fast, options).step_s, estimate_plan(config, {}, c, unnamed, options).step_s,
              1e-9 * plain.step_s);
  EXPECT_GT(stored.step_s, estimate_plan(config, {}, c, unnamed, options).step_s);  // std's slow rates do raise it
  // The head dim must be published: the shipped table (FlashAttention-2's benchmark, head dim 64 and 128) refuses 12
  // by name; an f32 run has no published rate.
  HardwareProfile shipped = load_profile(std::string(CLEAVE_SOURCE_DIR) + "/profiles/a100_80gb_sxm.json");
  shipped.attention_kernel = "pytorch";
  try {
    estimate_plan(config, {}, c, shipped, options);
    ADD_FAILURE() << "head dim 12 was priced";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no curve for kernel 'pytorch' forward mask"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("head dim 12"), std::string::npos) << e.what();
  }
  try {
    estimate_plan(tiny_gpt(), {}, c, a100, options);
    ADD_FAILURE() << "an f32 run was priced";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("an f32 run has no published rate"), std::string::npos) << e.what();
  }
}

// The simulated step's memory timeline is the memory plan's own, placed on the timeline's actions: on one stage it
// peaks at the plan's total (the timeline holds the rank's actions in the plan's walk order, and nothing the walk
// places is missing there without pipelining) at cp 1, 2 and 4 with either exchange, with and without the run's CPU
// kernels' threads (the attention scratch as transient buffers). A cp rank holds its share of the stash: fewer
// activations than at cp 1 (simulate --config showed one peak at cp 1, 2 and 4 before). Before the timeline read the
// cost model's stashes without cp's attention state, kept the exchange buffers in all step and the workspace out:
// all_to_all's timeline was 4.4-5.2% under the measured peak at T 8,192 (RESULTS-long-context-2026-11-30.md).
TEST_F(PlanSearch, MemoryTimelinePeaksAtTheMemoryPlansTotal) {
  HardwareProfile a100 = load_profile(std::string(CLEAVE_SOURCE_DIR) + "/profiles/a100_80gb_sxm.json");
  const std::string config = tiny_gpt();
  for (const int cores : {0, 8}) {
    a100.cores_per_node = cores;  // 0: threads unknown (no attention scratch); 8: the cpu device's threads per rank
    std::int64_t activations_cp1 = 0;
    for (const int cp : {1, 2, 4}) {
      for (const auto comm : {config::ContextParallelComm::kAllToAll, config::ContextParallelComm::kRing}) {
        PlanChoice c;
        c.global_batch = 8;
        c.cp = cp;
        c.cp_comm = comm;
        PlanDetails details;
        const PlanEstimate e = estimate_plan(config, {}, c, a100, SearchOptions{cp, 0}, &details);
        ASSERT_TRUE(e.valid) << e.reason;
        const std::string what = "cores " + std::to_string(cores) + " cp " + std::to_string(cp) +
                                 (comm == config::ContextParallelComm::kRing ? " ring" : " all_to_all");
        ASSERT_EQ(details.memory_total.size(), 1u) << what;
        EXPECT_EQ(details.memory_total[0], e.peak_bytes) << what;
        // Whole bytes on each side (the timeline scales in doubles, the walk in integers).
        EXPECT_NEAR(static_cast<double>(details.timeline_peak.at(0)), static_cast<double>(details.memory_total[0]), 16)
            << what;
        // The buffers an attention block holds only while it runs count above the activation peak, not whole.
        std::int64_t sum = 0;
        for (const std::int64_t b : details.memory_plan[0]) sum += b;
        EXPECT_LE(details.memory_total[0], sum) << what;
        const std::int64_t activations =
            details.memory_plan[0][static_cast<std::size_t>(MemoryCategory::kActivations)];
        if (cp == 1) activations_cp1 = activations;
        if (cp > 1) {
          EXPECT_LT(activations, activations_cp1) << what;  // a cp rank's share
        }
      }
    }
  }
}

TEST_F(PlanSearch, RanksTheHandCheckedBestPlanFirst) {
  // 2 ranks, every message costs a latency L and nothing per byte, compute C per step on one rank (flops, so
  // independent of the micro-batch). By hand: tp2 pays 2L per all-reduce, 17 per micro-batch; pp2 pays its
  // bubble (> 2L here) and P2P latencies; dp2 pays one all-reduce (2L) after the backward, or under ZeRO 1/2 a
  // reduce-scatter (L) and the parameters' all-gather after the step (L): C / 2 + 2L for every micro-batch size,
  // ZeRO 0 to 2; ZeRO-3 gathers every block per micro-batch. Among those equal times the least memory wins:
  // micro-batch 1, no recomputation (it only adds compute), a ZeRO stage that shards (ZeRO-0 keeps it all).
  const std::string config = tiny_gpt();
  HardwareProfile p = free_links();
  const double c = search_plans(config, {}, p, SearchOptions{1, 0}).ranked.front().step_s;
  const double latency = c * 1e-4;
  p.intra_node = p.inter_node = Link{latency, 1e30};
  const SearchResult r = search_plans(config, {}, p, SearchOptions{2, 0});
  ASSERT_FALSE(r.ranked.empty());
  const PlanEstimate& best = r.ranked.front();
  EXPECT_EQ(best.choice.layout(), "tp1 pp1 dp2");
  EXPECT_EQ(best.choice.micro_batch, 1);
  EXPECT_EQ(best.choice.recompute, partition::Recompute::kNone);
  EXPECT_GE(best.choice.zero_stage, 1);
  EXPECT_LE(best.choice.zero_stage, 2);
  EXPECT_NEAR(best.step_s, c / 2 + 2 * latency, 1e-9 * c);
  bool zero0_tied = false;
  for (const auto& e : r.ranked) {
    EXPECT_GE(e.step_s, best.step_s) << e.choice.layout();
    if (std::abs(e.step_s - best.step_s) < 1e-12 * c) {
      EXPECT_GE(e.peak_bytes, best.peak_bytes) << e.choice.layout();
    }
    if (e.choice.dp == 2 && e.choice.zero_stage == 0 && e.choice.micro_batch == 1 &&
        e.choice.recompute == partition::Recompute::kNone) {
      EXPECT_NEAR(e.step_s, best.step_s, 1e-9 * c);  // the same time: ranked below on memory
      EXPECT_GT(e.peak_bytes, best.peak_bytes);
      zero0_tied = true;
    }
    if (e.choice.tp == 2) {
      EXPECT_GT(e.step_s, best.step_s + 16 * latency);
    }
  }
  EXPECT_TRUE(zero0_tied);
}

TEST_F(PlanSearch, SearchesZeroStagesWithDataParallelAndSequenceParallelWithTensorParallel) {
  const SearchResult r = search_plans(tiny_gpt(), {}, free_links(), SearchOptions{2, 0});
  std::set<int> zero_dp2;
  bool sp_tp1 = false, sp_seen = false;
  for (const auto* list : {&r.ranked, &r.rejected}) {
    for (const auto& e : *list) {
      if (e.choice.dp == 2) zero_dp2.insert(e.choice.zero_stage);
      if (e.choice.dp * e.choice.cp == 1) {  // no replica (dp × cp) to shard over
        EXPECT_EQ(e.choice.zero_stage, 0);
      }
      sp_seen |= e.choice.sequence_parallel && e.choice.tp == 2;
      sp_tp1 |= e.choice.sequence_parallel && e.choice.tp == 1;
    }
  }
  EXPECT_EQ(zero_dp2, (std::set<int>{0, 1, 2, 3}));
  EXPECT_TRUE(sp_seen);
  EXPECT_FALSE(sp_tp1);
}

TEST_F(PlanSearch, ZeroStagesAndSequenceParallelPriceTheirCommunication) {
  // One message costs latency only. dp2 of one stage: ZeRO-0 all-reduces (2L); ZeRO-1 reduce-scatters (L) and
  // all-gathers after the step (L); tp2: sequence parallelism's reduce-scatter + all-gather cost what the
  // all-reduce did. The optimizer step is free, so the breakdowns show exactly that.
  const std::string config = tiny_gpt();
  HardwareProfile p = free_links();
  const double latency = 1e-3;
  p.intra_node = p.inter_node = Link{latency, 1e30};
  const SearchOptions two{2, 0};
  using partition::Recompute;
  const PlanEstimate z0 = estimate_plan(config, {}, PlanChoice{1, 1, 2, 1, "1f1b", 1, 0, Recompute::kNone, 8, false}, p, two);
  const PlanEstimate z1 = estimate_plan(config, {}, PlanChoice{1, 1, 2, 1, "1f1b", 1, 1, Recompute::kNone, 8, false}, p, two);
  ASSERT_TRUE(z0.valid && z1.valid) << z0.reason << z1.reason;
  EXPECT_NEAR(z0.breakdown.dp_comm_s, 2 * latency, 1e-12);
  EXPECT_NEAR(z1.breakdown.dp_comm_s, 2 * latency, 1e-12);
  EXPECT_GT(z1.comm_bytes, 0.0);
  const PlanEstimate z3 = estimate_plan(
      config, {}, PlanChoice{1, 1, 2, 1, "1f1b", 1, 3, Recompute::kNone, 8, false, config::ZeroReduce::kPerStep}, p, two);
  ASSERT_TRUE(z3.valid) << z3.reason;
  // ZeRO-3: the reduce-scatter, then per micro-batch (4) one gather before F and one before I (none before W) of
  // each of the 7 blocks with parameters (embedding, 4 transformer blocks, final norm, the tied head: the loss
  // has none), each but a pass's first less what the block before it computes (prefetch).
  const double gathers = 2 * 4 * 7 * latency;
  EXPECT_LE(z3.breakdown.dp_comm_s, latency + gathers + 1e-12);
  EXPECT_GT(z3.breakdown.dp_comm_s, latency + gathers - z3.breakdown.compute_s);
  EXPECT_GT(z3.comm_bytes, 0.0);
  // optimizer.zero_reduce per_microbatch: 4 reduce-scatters instead of 1, each of the first 3 behind the next
  // weight-gradient pass, charged what the pass cannot hide: nothing here (a W pass of the tiny model takes longer
  // than a latency at 1 GFLOP/s), 3/4 of a latency per W pass (3 latencies a step) when compute is free; in
  // exchange a lower gradient peak (the shards and two blocks' buckets instead of the whole local gradient).
  const PlanChoice per_microbatch{1, 1, 2, 1, "1f1b", 1, 3, Recompute::kNone, 8, false, config::ZeroReduce::kPerMicrobatch};
  const PlanEstimate z3m = estimate_plan(config, {}, per_microbatch, p, two);
  ASSERT_TRUE(z3m.valid) << z3m.reason;
  EXPECT_NEAR(z3m.breakdown.dp_comm_s, z3.breakdown.dp_comm_s, 1e-12);
  EXPECT_GT(z3m.comm_bytes, z3.comm_bytes);
  EXPECT_LT(z3m.peak_bytes, z3.peak_bytes);
  HardwareProfile free_compute = p;
  free_compute.flops_f32 = free_compute.flops_bf16 = 1e30;
  PlanChoice per_step = per_microbatch;
  per_step.zero_reduce = config::ZeroReduce::kPerStep;
  const PlanEstimate fast_step = estimate_plan(config, {}, per_step, free_compute, two);
  const PlanEstimate fast_microbatch = estimate_plan(config, {}, per_microbatch, free_compute, two);
  ASSERT_TRUE(fast_step.valid && fast_microbatch.valid) << fast_step.reason << fast_microbatch.reason;
  EXPECT_NEAR(fast_microbatch.breakdown.dp_comm_s - fast_step.breakdown.dp_comm_s, 3 * latency, 1e-6 * latency);
  EXPECT_GT(fast_microbatch.step_s, fast_step.step_s);
  const PlanEstimate tp = estimate_plan(config, {}, PlanChoice{2, 1, 1, 1, "1f1b", 1, 0, Recompute::kNone, 8, false}, p, two);
  const PlanEstimate sp = estimate_plan(config, {}, PlanChoice{2, 1, 1, 1, "1f1b", 1, 0, Recompute::kNone, 8, true}, p, two);
  ASSERT_TRUE(tp.valid) << tp.reason;
  // 8 micro-batches of 2 all-reduces per block in F and 2 in I, the embedding's 1, the head's 1 and the loss's 2.
  EXPECT_NEAR(tp.breakdown.tp_comm_s, 8 * (2 * 4 + 2 * 4 + 4) * 2 * latency, 1e-9);
  if (sp.valid) {
    // Each all-reduce of [T, D] becomes a reduce-scatter and an all-gather of the same bytes (one latency each), and
    // every column-parallel input (the blocks' 2, the head's) is all-gathered again for W: 4L + 1 more [T, D]
    // all-gathers, (tp - 1)/tp of the tensor each, (4L + 1) latencies more a micro-batch.
    EXPECT_NEAR(sp.breakdown.tp_comm_s - tp.breakdown.tp_comm_s, 8 * (2 * 4 + 1) * latency, 1e-9);
    const double stream = 16.0 * 48 * 4;  // [T, D] f32
    EXPECT_NEAR(sp.comm_bytes - tp.comm_bytes, 8 * (2 * 4 + 1) * stream / 2, 1e-6 * tp.comm_bytes);
  }
}

// optimizer.zero_reduce: the search prices ZeRO-2 and 3 in both forms. Under a cap between the two forms' peaks
// of ZeRO-3 at dp2, the per-micro-batch plan is ranked and the per-step one refused for memory; without a cap both
// are ranked, and in deterministic mode only the per-step one is searched (per micro-batch does not apply there).
TEST_F(PlanSearch, PricesBothZeroReduceFormsAndKeepsTheOneThatFits) {
  const std::string config = tiny_gpt();
  const HardwareProfile p = free_links();
  using partition::Recompute;
  const PlanChoice per_step{1, 1, 2, 1, "1f1b", 1, 3, Recompute::kNone, 8, false, config::ZeroReduce::kPerStep};
  PlanChoice per_microbatch = per_step;
  per_microbatch.zero_reduce = config::ZeroReduce::kPerMicrobatch;
  const PlanEstimate step = estimate_plan(config, {}, per_step, p, SearchOptions{2, 0});
  const PlanEstimate microbatch = estimate_plan(config, {}, per_microbatch, p, SearchOptions{2, 0});
  ASSERT_TRUE(step.valid && microbatch.valid) << step.reason << microbatch.reason;
  ASSERT_LT(microbatch.peak_bytes, step.peak_bytes);
  const auto forms = [](const std::vector<PlanEstimate>& plans) {
    std::set<config::ZeroReduce> seen;
    for (const PlanEstimate& e : plans) {
      if (e.choice.layout() == "tp1 pp1 dp2" && e.choice.zero_stage == 3 && e.choice.micro_batch == 1 &&
          e.choice.recompute == Recompute::kNone) {
        seen.insert(e.choice.zero_reduce);
      }
    }
    return seen;
  };
  const SearchResult capped = search_plans(config, {}, p, SearchOptions{2, (step.peak_bytes + microbatch.peak_bytes) / 2});
  EXPECT_EQ(forms(capped.ranked), std::set<config::ZeroReduce>{config::ZeroReduce::kPerMicrobatch});
  EXPECT_EQ(forms(capped.rejected), std::set<config::ZeroReduce>{config::ZeroReduce::kPerStep});
  const SearchResult uncapped = search_plans(config, {}, p, SearchOptions{2, 0});
  EXPECT_EQ(forms(uncapped.ranked),
            (std::set<config::ZeroReduce>{config::ZeroReduce::kPerMicrobatch, config::ZeroReduce::kPerStep}));
  const SearchResult deterministic = search_plans(config, {"train.deterministic=true"}, p, SearchOptions{2, 0});
  EXPECT_EQ(forms(deterministic.ranked), std::set<config::ZeroReduce>{config::ZeroReduce::kPerStep});
  for (const PlanEstimate& e : uncapped.ranked) {  // `cleave plan`'s --set lines select the form
    const std::vector<std::string> keys = e.choice.overrides();
    const std::string key = "optimizer.zero_reduce=" + std::string(enum_name(e.choice.zero_reduce));
    EXPECT_EQ(std::find(keys.begin(), keys.end(), key) != keys.end(), e.choice.zero_stage >= 2) << e.choice.zero_label();
  }
}

TEST_F(PlanSearch, ChoosesZeroThreeWhenOnlyItFits) {
  // A model whose parameters dominate (a 2048-token vocabulary, one head so tp stays 1) on 7 ranks: its 6 blocks
  // cannot be pipelined over 7, so every layout is dp7. ZeRO-3 keeps 1/dp of the parameters and two adjacent
  // blocks' in full (the embedding's unit, the tied table, is the largest), against ZeRO-1's and 2's whole
  // parameters: under a cap between its need and the next best every plan that fits is a ZeRO-3 plan. (Where
  // the model can be pipelined, pipelining needs less: ZeRO-3 keeps a step's full local gradients, as ZeRO-2
  // does, while pp divides them.)
  const std::string config = write("wide.json", R"({"model": {"type": "gpt", "vocab_size": 2048, "d_model": 64,
    "n_layers": 2, "n_heads": 1, "seq_len": 4}, "batch": {"global_batch_size": 7},
    "optimizer": {"type": "adamw"}, "data": {"type": "synthetic"}})");
  const PlanEstimate probe = estimate_plan(
      config, {}, PlanChoice{1, 1, 7, 1, "1f1b", 1, 3, partition::Recompute::kNone, 7, false}, free_links(),
      SearchOptions{7, 0});
  ASSERT_TRUE(probe.valid) << probe.reason;
  const SearchResult all = search_plans(config, {}, free_links(), SearchOptions{7, 0});
  std::int64_t zero3 = -1, other = -1;
  for (const auto& e : all.ranked) {
    ASSERT_EQ(e.choice.dp, 7) << e.choice.layout();
    auto& least = e.choice.zero_stage == 3 ? zero3 : other;
    if (least < 0 || e.peak_bytes < least) least = e.peak_bytes;
  }
  ASSERT_GT(zero3, 0);
  ASSERT_LT(zero3, other) << "ZeRO-3 does not need the least memory for this model";
  const SearchResult capped = search_plans(config, {}, free_links(), SearchOptions{7, (zero3 + other) / 2});
  ASSERT_FALSE(capped.ranked.empty());
  for (const auto& e : capped.ranked) EXPECT_EQ(e.choice.zero_stage, 3) << e.choice.layout();
  EXPECT_LE(capped.ranked.front().peak_bytes, (zero3 + other) / 2);
}

TEST_F(PlanSearch, ChoosesContextParallelWhenOnlyItFits) {
  // A long sequence with one head (tp stays 1), one layer (pp cannot split the attention block) and a global
  // batch of 1 (no dp) on 2 ranks: only context parallelism divides the attention's activations. Under a cap
  // between the cp layouts' need and the best of the rest, every plan that fits is a cp2 plan (ring: one head
  // rules all_to_all out), and its --set lines select it.
  const std::string config = write("long.json", R"({"model": {"type": "gpt", "vocab_size": 64, "d_model": 16,
    "n_layers": 1, "n_heads": 1, "seq_len": 1024}, "batch": {"global_batch_size": 1},
    "optimizer": {"type": "adamw"}, "data": {"type": "synthetic"}})");
  const SearchResult all = search_plans(config, {}, free_links(), SearchOptions{2, 0});
  std::int64_t with_cp = -1, without = -1;
  for (const auto& e : all.ranked) {
    EXPECT_EQ(e.choice.tp * e.choice.cp * e.choice.pp * e.choice.dp, 2) << e.choice.layout();
    if (e.choice.cp > 1) {
      EXPECT_EQ(e.choice.cp_comm, config::ContextParallelComm::kRing) << e.choice.layout();
    }
    auto& least = e.choice.cp > 1 ? with_cp : without;
    if (least < 0 || e.peak_bytes < least) least = e.peak_bytes;
  }
  ASSERT_GT(with_cp, 0) << "no cp layout was searched";
  ASSERT_LT(with_cp, without) << "cp does not need the least memory for this model";
  const SearchResult capped = search_plans(config, {}, free_links(), SearchOptions{2, (with_cp + without) / 2});
  ASSERT_FALSE(capped.ranked.empty());
  for (const auto& e : capped.ranked) EXPECT_EQ(e.choice.cp, 2) << e.choice.layout();
  const PlanChoice& best = capped.ranked.front().choice;
  EXPECT_EQ(best.layout(), "tp1 cp2 pp1 dp1");
  const std::vector<std::string> keys = best.overrides();
  EXPECT_NE(std::find(keys.begin(), keys.end(), "parallel.context_parallel_size=2"), keys.end());
  EXPECT_NE(std::find(keys.begin(), keys.end(), "parallel.context_parallel_comm=ring"), keys.end());
}

TEST_F(PlanSearch, ScatterGatherSendsATensorParallelShareOfEachBoundary) {
  // tp2 pp2 on two nodes of 2: P2P crosses a slow link, the tp group's gather is free inside the node. Sending
  // 1/tp of each boundary tensor takes P2P time off the critical path; with it off the estimate is unchanged.
  HardwareProfile p = free_links();
  p.ranks_per_node = 2;
  p.inter_node = Link{1e-30, 1e5};
  const PlanChoice c{2, 2, 1, 1, "1f1b", 1, 0, partition::Recompute::kNone, 8, false};
  const PlanEstimate whole = estimate_plan(tiny_gpt(), {}, c, p, SearchOptions{4, 0});
  const PlanEstimate split = estimate_plan(tiny_gpt(), {}, c, p, SearchOptions{4, 0, true});
  ASSERT_TRUE(whole.valid) << whole.reason;
  EXPECT_LT(split.step_s, 0.9 * whole.step_s);
  EXPECT_EQ(estimate_plan(tiny_gpt(), {}, PlanChoice{1, 2, 2, 1, "1f1b", 1, 0, partition::Recompute::kNone, 8, false},
                          p, SearchOptions{4, 0, true}).step_s,
            estimate_plan(tiny_gpt(), {}, PlanChoice{1, 2, 2, 1, "1f1b", 1, 0, partition::Recompute::kNone, 8, false},
                          p, SearchOptions{4, 0}).step_s);  // tp 1: nothing to scatter
}

TEST(Link, RingAllReduceCost) {
  const Link link{1e-5, 1e9};
  EXPECT_EQ(link.all_reduce_s(1e6, 1), 0.0);
  EXPECT_NEAR(link.all_reduce_s(1e6, 4), 2.0 * 3 / 4 * 1e6 / 1e9 + 6 * 1e-5, 1e-15);
}

}  // namespace
}  // namespace cleave::planner::plan_search_test

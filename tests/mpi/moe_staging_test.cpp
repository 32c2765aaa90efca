// The memory plan's host line under context and expert parallelism, against the moe layer's own requests (2 ranks,
// the cp and the ep group each the whole world): a CPU context given a counting staging allocator stages what a GPU
// stages (layers/moe/moe_mlp.cpp, balance_exchange.cpp, expert_dispatch.cpp), so the bytes it holds can be set
// against partition/families/moe_staging.hpp's formula, the cp count row 8·b·(E + 1) and the ep counts 8·E that
// MoeMlp.UploadStagingIsThePlansFormula (one rank) cannot reach. Then the walk (run_plan::moe_staging_peak) against
// the staging allocator's peak when three moe layers run a plan's actions (GPipe and 1F1B, with and without full
// recomputation; cp2, ep2 and both): the plan's figure is the layers' peak to the byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/config/config.hpp"
#include "engine/core/allocator.hpp"
#include "engine/core/rng.hpp"
#include "engine/run_plan/host_memory.hpp"
#include "engine/run_plan/plan.hpp"
#include "layers/moe/moe_mlp.hpp"
#include "layers/recomputed.hpp"
#include "partition/families/moe_staging.hpp"
#include "partition/model_spec.hpp"
#include "pipeline/action.hpp"
#include "tests/mpi/mpi_test_env.hpp"

namespace cleave::layers::moe_staging_test {
namespace {

constexpr std::int64_t kD = 8, kF = 8, kExperts = 4, kTopK = 2, kMicro = 2, kSeq = 16;

Tensor random_tensor(const Shape& shape, std::uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  rng::fill_normal(t.data<float>(), t.numel(), seed, rng::hash_key("moe-staging-test"), 0.0f, 1.0f);
  return t;
}

RouterOptions router(double aux) {
  RouterOptions o;
  o.kind = partition::RouterKind::kSoftmax;
  o.experts = kExperts;
  o.top_k = kTopK;
  o.normalize = true;
  o.aux_coef = aux;
  return o;
}

// A moe layer of E experts, ep ranks holding E / ep each (this rank's share at ep > 1).
std::unique_ptr<MoeMlp> make_layer(int index, double aux, int ep, int ep_rank) {
  ParamInit init{cpu_allocator()};
  init.scheme = InitScheme::kGpt2;
  init.seed = 41 + static_cast<std::uint64_t>(index);
  return std::make_unique<MoeMlp>("blocks." + std::to_string(index) + ".moe", kD, kF, router(aux), nullptr, init, 1, 0,
                                  ep, ep_rank);
}

// The formula's bytes for one block and micro-batch at this cp and ep.
partition::MoeUploadStaging formula(int cp, int ep, bool aux) {
  partition::BlockSpec block;
  block.kind = partition::BlockKind::kMoeBlock;
  block.n_experts = kExperts;
  block.top_k = kTopK;
  block.seq_len = kSeq;
  block.aux_loss = aux;
  return partition::moe_upload_staging(block, kMicro, cp, ep);
}

// The groups of one case: cp and ep each the whole world or absent, and a counting staging allocator.
struct Groups {
  std::unique_ptr<comm::MpiCommunicator> cp, ep;
  std::unique_ptr<Allocator> staging = make_cpu_allocator();
  Context ctx;
  Groups(bool with_cp, bool with_ep) {
    if (with_cp) cp = testing::make_world();
    if (with_ep) ep = testing::make_world();
    ctx.cp_comm = cp.get();
    ctx.ep_comm = ep.get();
    ctx.upload_staging = staging.get();
  }
  std::int64_t live() const { return staging->stats().current_total; }
  std::int64_t peak() const { return staging->stats().peak_total; }
  int cp_size() const { return cp ? cp->size() : 1; }
  int ep_size() const { return ep ? ep->size() : 1; }
};

// This rank's tokens of a micro-batch: [micro, T / cp, D].
Tensor input(const Groups& g, int rank, std::uint64_t salt) {
  return random_tensor(Shape{kMicro, kSeq / g.cp_size(), kD}, 1000 * salt + static_cast<std::uint64_t>(rank));
}

TEST(MoeStaging, CpCountRowIsHeldWithTheUploads) {
  for (const bool aux : {true, false}) {
    SCOPED_TRACE(aux ? "aux loss on" : "aux loss off");
    Groups g(true, false);
    const int rank = g.cp->rank(), cp = g.cp_size();
    const partition::MoeUploadStaging per = formula(cp, 1, aux);
    EXPECT_EQ(per.uploads, 16 * kMicro * kSeq / cp * kTopK);
    EXPECT_EQ(per.balance, aux ? 8 * kMicro * (kExperts + 1) : 0);
    EXPECT_EQ(per.dispatch, 0);
    auto layer = make_layer(0, aux ? 0.01 : 0.0, 1, 0);
    Stash first, second;
    layer->forward(input(g, rank, 1), first, g.ctx);
    EXPECT_EQ(g.live(), per.held());
    layer->forward(input(g, rank, 2), second, g.ctx);
    EXPECT_EQ(g.live(), 2 * per.held());
    EXPECT_EQ(g.staging->stats().requests, aux ? 10 : 8);  // four uploads a forward, and the count row
    layer->backward_input(input(g, rank, 3), first, g.ctx);
    EXPECT_EQ(g.live(), per.held());
    layer->backward_weight(first, g.ctx);
    layer->backward_input(input(g, rank, 4), second, g.ctx);
    layer->backward_weight(second, g.ctx);
    EXPECT_EQ(g.live(), 0);
    EXPECT_EQ(g.peak(), 2 * per.held());
    // A forward no backward follows posts no exchange: its uploads only, until its copies are done.
    g.staging->reset_peak();
    Stash dropped;
    dropped.backward_follows = false;
    layer->forward(input(g, rank, 5), dropped, g.ctx);
    EXPECT_EQ(g.live(), 0);
    EXPECT_EQ(g.peak(), per.uploads);
  }
}

TEST(MoeStaging, EpCountsAreATransientOfTheForward) {
  Groups g(false, true);
  const int rank = g.ep->rank(), ep = g.ep_size();
  const partition::MoeUploadStaging per = formula(1, ep, true);
  EXPECT_EQ(per.dispatch, 8 * kExperts);
  EXPECT_EQ(per.balance, 0);  // cp 1
  auto layer = make_layer(0, 0.01, ep, rank);
  Stash first, second;
  layer->forward(input(g, rank, 1), first, g.ctx);
  EXPECT_EQ(g.live(), per.held());                 // the counts are freed inside the forward
  EXPECT_EQ(g.peak(), per.held() + per.dispatch);  // on top of the block's uploads
  layer->forward(input(g, rank, 2), second, g.ctx);
  EXPECT_EQ(g.live(), 2 * per.held());
  EXPECT_EQ(g.peak(), 2 * per.held() + per.dispatch);
  EXPECT_EQ(g.staging->stats().requests, 10);  // four uploads and the counts a forward
  layer->backward(input(g, rank, 3), first, g.ctx);  // the backward reuses the forward's plan: no counts
  layer->backward(input(g, rank, 4), second, g.ctx);
  EXPECT_EQ(g.live(), 0);
  EXPECT_EQ(g.staging->stats().requests, 10);
  // A forward no backward follows waits for its uploads before it dispatches.
  g.staging->reset_peak();
  Stash dropped;
  dropped.backward_follows = false;
  layer->forward(input(g, rank, 5), dropped, g.ctx);
  EXPECT_EQ(g.live(), 0);
  EXPECT_EQ(g.peak(), std::max(per.uploads, per.dispatch));
}

// The plan of a 3-block moe (the layers' sizes) at cp and ep on the world, 4 micro-batches per replica.
config::RunConfig moe_config(int world, int cp, int ep, const std::string& schedule, bool full) {
  const int dp = world / cp;
  config::RunConfig c = config::parse_config(R"({
    "model": {"type": "moe", "vocab_size": 64, "d_model": 8, "n_layers": 3, "n_heads": 2, "seq_len": 16,
              "ffn_hidden_size": 8, "n_experts": 4, "top_k": 2},
    "batch": {"micro_batch_size": 2},
    "optimizer": {"type": "sgd", "lr": 0.05}, "data": {"type": "synthetic"}})",
                                             "<string>",
                                             {"parallel.schedule=" + schedule,
                                              "parallel.context_parallel_size=" + std::to_string(cp),
                                              "parallel.expert_model_parallel_size=" + std::to_string(ep),
                                              "batch.global_batch_size=" + std::to_string(4 * kMicro * dp),
                                              std::string("train.recompute=") + (full ? "full" : "none")});
  c.resolve(world);
  return c;
}

// Three moe layers (each wrapped for full recomputation when the plan recomputes) run pp rank 0's actions of the
// plan; the staging allocator's peak over them.
std::int64_t layers_peak(const run_plan::Plan& plan, bool full, Groups& g, int rank) {
  const int ep_rank = g.ep ? g.ep->rank() : 0;
  std::vector<LayerPtr> layers;
  for (int i = 0; i < 3; ++i) {
    LayerPtr l = make_layer(i, 0.01, g.ep_size(), ep_rank);
    if (full) l = std::make_unique<RecomputedLayer>(std::move(l));
    layers.push_back(std::move(l));
  }
  std::map<int, std::vector<Stash>> stashes;
  for (const pipeline::Action& a : plan.schedule.ranks[0]) {
    if (a.stage < 0 || !pipeline::is_compute(a.kind)) continue;
    std::vector<Stash>& s = stashes[a.microbatch];
    const auto salt = static_cast<std::uint64_t>(a.microbatch + 1);
    if (a.kind == pipeline::ActionKind::kForward) {
      s.assign(layers.size(), Stash{});
      Tensor x = input(g, rank, salt);
      for (std::size_t l = 0; l < layers.size(); ++l) x = layers[l]->forward(x, s[l], g.ctx);
      continue;
    }
    if (a.kind == pipeline::ActionKind::kBackwardWeight) {
      for (std::size_t l = 0; l < layers.size(); ++l) layers[l]->backward_weight(s[l], g.ctx);
      continue;
    }
    Tensor dy = input(g, rank, 100 + salt);
    for (std::size_t l = layers.size(); l-- > 0;) {
      dy = layers[l]->backward_input(dy, s[l], g.ctx);
      if (a.kind == pipeline::ActionKind::kBackward) layers[l]->backward_weight(s[l], g.ctx);
    }
  }
  EXPECT_EQ(g.live(), 0) << "staging left after the step";
  return g.peak();
}

TEST(MoeStaging, TheWalkIsTheLayersPeak) {
  auto world = testing::make_world();
  const int n = world->size(), rank = world->rank();
  for (const auto& [cp, ep] : {std::pair{n, 1}, std::pair{1, n}, std::pair{n, n}}) {
    for (const std::string schedule : {"gpipe", "1f1b"}) {
      for (const bool full : {false, true}) {
        const std::string name = "cp" + std::to_string(cp) + " ep" + std::to_string(ep) + " " + schedule +
                                 (full ? " recompute full" : "");
        SCOPED_TRACE(name);
        const config::RunConfig c = moe_config(n, cp, ep, schedule, full);
        const run_plan::Plan plan =
            run_plan::make_plan(c, static_cast<int>(c.resolved_batch().gradient_accumulation_steps), 0);
        EXPECT_EQ(plan.schedule.num_microbatches, 4);
        const std::int64_t planned = run_plan::moe_staging_peak(plan, c, 0);
        Groups g(cp > 1, ep > 1);
        const std::int64_t measured = layers_peak(plan, full, g, rank);
        EXPECT_EQ(planned, measured);
        if (rank == 0) {
          std::printf("[ staging ] %s: planned %lld B, the layers' peak %lld B\n", name.c_str(),
                      static_cast<long long>(planned), static_cast<long long>(measured));
        }
      }
    }
  }
}

}  // namespace
}  // namespace cleave::layers::moe_staging_test

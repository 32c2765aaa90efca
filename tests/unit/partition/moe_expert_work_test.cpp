// The moe block's roofline work prices its routed experts as the engine launches them (partition/families/moe.hpp,
// moe_routed_expert_work): E GEMMs per projection of about micro · T · k / E rows each, each at its own size on the
// profile's efficiency curve (HardwareProfile::gemm_seconds of one launch, times Gemm::groups). On the shipped H100
// profile (recorded inputs: its cited curve) and a Mixtral-sized block: one expert of top-1 is llama's SwiGLU
// exactly; at the same FLOPs more, smaller experts cost more where the curve falls and the same where it is flat;
// the ep imbalance raises it.
#include <gtest/gtest.h>

#include <string>

#include "partition/block_work.hpp"
#include "partition/cost_model.hpp"
#include "partition/families/llama.hpp"
#include "partition/families/moe.hpp"
#include "partition/hardware_profile.hpp"
#include "partition/model_spec.hpp"

namespace cleave::partition::moe_expert_work_test {
namespace {

HardwareProfile h100() { return load_profile(std::string(CLEAVE_SOURCE_DIR) + "/profiles/h100_sxm.json"); }

// Mixtral 8x7B's block sizes (D 4096, 32 heads over 8 kv heads, F 14336, E 8, k 2) at T 4096.
MoeConfig mixtral() {
  MoeConfig c;
  c.vocab_size = 256;
  c.d_model = 4096;
  c.n_layers = 1;
  c.n_heads = 32;
  c.n_kv_heads = 8;
  c.ffn_hidden_size = 14336;
  c.seq_len = 4096;
  c.n_experts = 8;
  c.top_k = 2;
  return c;
}

BlockSpec moe_block(const MoeConfig& c) {
  const ModelSpec spec = make_moe_spec(c);
  for (const BlockSpec& b : spec.blocks) {
    if (b.n_experts > 0) return b;
  }
  ADD_FAILURE() << "no moe block";
  return {};
}

double priced(const HardwareProfile& p, const BlockWork& w) {
  return p.roofline_seconds(w.forward, true) + p.roofline_seconds(w.input_grad, true) +
         p.roofline_seconds(w.weight_grad, true);
}

bool same_gemms(const std::vector<Gemm>& a, const std::vector<Gemm>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].m != b[i].m || a[i].n != b[i].n || a[i].k != b[i].k || a[i].batch != b[i].batch ||
        a[i].groups != b[i].groups || a[i].fused_attention != b[i].fused_attention) {
      return false;
    }
  }
  return true;
}

// E = 1, k = 1: the mixture is one SwiGLU over every token, llama's. The moe block's kernels are the llama block's
// plus the router's GEMM [rows, D] x [D, 1], its softmax / top-k traffic and kernel, and the routing's gather and
// combine (moe_routing_work); its price is llama's plus theirs.
TEST(MoeExpertWork, OneExpertTopOneIsTheDenseSwiglu) {
  const HardwareProfile p = h100();
  MoeConfig c = mixtral();
  c.n_experts = 1;
  c.top_k = 1;
  const BlockSpec moe = moe_block(c);
  const LlamaConfig& dense_config = c;
  const BlockSpec dense = make_llama_spec(dense_config).blocks[1];
  ASSERT_EQ(dense.d_ff, moe.d_ff);
  for (const Recompute r : {Recompute::kNone, Recompute::kSelective}) {
    for (const int tp : {1, 2}) {
      const std::int64_t micro = 2;
      const BlockWork m = block_work(moe, DType::kBF16, r, tp, micro);
      const BlockWork l = block_work(dense, DType::kBF16, r, tp, micro);
      const double rows = 2.0 * 4096;
      const Gemm router_f{rows, 1, 4096}, router_i{rows, 4096, 1}, router_w{1, 4096, rows};
      std::vector<Gemm> f = l.forward.gemms, i = l.input_grad.gemms, w = l.weight_grad.gemms;
      f.push_back(router_f);
      i.push_back(router_i);
      w.push_back(router_w);
      if (r == Recompute::kSelective) {  // the attention core's rerun follows the block's own I
        std::vector<Gemm> rerun(l.input_grad.gemms.end() - 2, l.input_grad.gemms.end());
        i.erase(i.end() - 3, i.end() - 1);
        i.insert(i.end(), rerun.begin(), rerun.end());
      }
      EXPECT_TRUE(same_gemms(m.forward.gemms, f)) << tp;
      EXPECT_TRUE(same_gemms(m.weight_grad.gemms, w)) << tp;
      EXPECT_TRUE(same_gemms(m.input_grad.gemms, i)) << tp;
      // Priced: llama's block plus the router's three GEMMs, its streamed f32 logits (2 and 3 reads and writes of
      // [rows, 1] in F and I) and five launches (the GEMMs, softmax / top-k in F and its gradient in I).
      const double router = p.gemm_seconds(router_f, true) + p.gemm_seconds(router_i, true) +
                            p.gemm_seconds(router_w, true) + (2 + 3) * rows * 4 / p.memory_bandwidth_Bps +
                            5 * p.kernel_launch_s;
      const BlockWork routing = moe_routing_work(moe, DType::kBF16, micro);
      const double moved = (routing.forward.stream_bytes + routing.input_grad.stream_bytes) / p.memory_bandwidth_Bps +
                           (routing.forward.kernels + routing.input_grad.kernels) * p.kernel_launch_s;
      EXPECT_NEAR(priced(p, m), priced(p, l) + router + moved, 1e-12 * priced(p, l)) << tp;
    }
  }
  // And the routed experts alone are llama's three SwiGLU GEMMs, one launch each, priced alike.
  const BlockWork routed = moe_routed_expert_work(moe, DType::kBF16, 1, 1);
  ASSERT_EQ(routed.forward.gemms.size(), 3u);
  const BlockWork l = block_work(dense, DType::kBF16, Recompute::kNone, 1, 1);
  for (std::size_t g = 0; g < 3; ++g) {
    const Gemm& mine = routed.forward.gemms[g];
    const Gemm& theirs = l.forward.gemms[l.forward.gemms.size() - 3 + g];
    EXPECT_EQ(mine.groups, 1);
    EXPECT_DOUBLE_EQ(p.gemm_seconds(mine, true), p.gemm_seconds(theirs, true));
  }
}

// The same FLOPs (T·k rows, F wide) cut into E experts of T·k / E rows: the price is E launches of the smaller GEMM,
// at the curve's efficiency for its FLOPs. It grows with E wherever that efficiency falls, and stays where the curve
// is flat; the FLOPs never change.
TEST(MoeExpertWork, SmallerExpertsCostMoreWhereTheCurveFalls) {
  const HardwareProfile p = h100();
  MoeConfig c = mixtral();
  c.top_k = 1;
  double previous = 0, flops = 0;
  int grew = 0;
  for (const std::int64_t e : {1, 2, 4, 8, 16, 64, 256}) {
    c.n_experts = e;
    const BlockSpec block = moe_block(c);
    const BlockWork w = moe_routed_expert_work(block, DType::kBF16, 1, 1);
    const Gemm& gate = w.forward.gemms.front();
    EXPECT_DOUBLE_EQ(gate.m, 4096.0 / static_cast<double>(e)) << e;  // T·k / E rows per launch
    EXPECT_EQ(gate.groups, static_cast<double>(e));
    EXPECT_EQ(w.forward.kernels, 3.0 * static_cast<double>(e) + 1) << e;  // a launch per expert and projection, SwiGLU
    // One launch priced at its own FLOPs, times E (not one GEMM of all E's work).
    Gemm one = gate;
    one.groups = 1;
    EXPECT_DOUBLE_EQ(p.gemm_seconds(gate, true), static_cast<double>(e) * p.gemm_seconds(one, true)) << e;
    EXPECT_DOUBLE_EQ(p.gemm_efficiency_of(gate, true), p.gemm_efficiency_at(one.flops(), true)) << e;
    if (e == 1) flops = w.forward.gemm_flops();
    EXPECT_DOUBLE_EQ(w.forward.gemm_flops(), flops) << e;
    const double now = priced(p, w);
    if (previous > 0) {
      EXPECT_GE(now, previous * (1 - 1e-12)) << e;
      if (now > previous * 1.01) ++grew;
    }
    previous = now;
  }
  EXPECT_GE(grew, 2);  // 256 experts of 16 rows are far down the curve
  // Where the curve is flat the split costs nothing: the same profile with one efficiency at every size (no wave
  // term, a bandwidth that never binds) prices 256 experts of 16 rows as 1 of 4096.
  HardwareProfile flat = p;
  flat.gemm_efficiency = {{1.0, 0.7}, {1e16, 0.7}};
  flat.sm_count = 0;
  flat.gemm_tiles.clear();
  flat.memory_bandwidth_Bps = 1e30;
  c.n_experts = 1;
  const BlockWork whole = moe_routed_expert_work(moe_block(c), DType::kBF16, 1, 1);
  c.n_experts = 256;
  const BlockWork split = moe_routed_expert_work(moe_block(c), DType::kBF16, 1, 1);
  for (const auto pass : {&BlockWork::forward, &BlockWork::input_grad, &BlockWork::weight_grad}) {
    const double one = flat.gemm_pass_seconds(whole.*pass, true);
    EXPECT_NEAR(flat.gemm_pass_seconds(split.*pass, true), one, 1e-12 * one);
    EXPECT_GT(p.gemm_pass_seconds(split.*pass, true), 2 * p.gemm_pass_seconds(whole.*pass, true));
  }
}

// The busiest ep rank: each of its E GEMMs per projection at imbalance × the mean rows. More rows, more time (and
// FLOPs × imbalance); at imbalance 1 the mean rank's.
TEST(MoeExpertWork, ImbalanceRaisesThePrice) {
  const HardwareProfile p = h100();
  const BlockSpec block = moe_block(mixtral());
  const BlockWork even = moe_routed_expert_work(block, DType::kBF16, 2, 1, 1.0);
  double last = priced(p, even);
  for (const double f : {1.1, 1.5, 2.0}) {
    const BlockWork hot = moe_routed_expert_work(block, DType::kBF16, 2, 1, f);
    EXPECT_DOUBLE_EQ(hot.forward.gemms.front().m, f * even.forward.gemms.front().m);
    EXPECT_DOUBLE_EQ(hot.forward.gemm_flops(), f * even.forward.gemm_flops());
    EXPECT_DOUBLE_EQ(hot.weight_grad.gemm_flops(), f * even.weight_grad.gemm_flops());
    EXPECT_EQ(hot.forward.kernels, even.forward.kernels);
    const double now = priced(p, hot);
    EXPECT_GT(now, last) << f;
    last = now;
  }
  // The cost model's FLOPs: 3 GEMMs of 2·T·k·D·F / tp per sample and pass.
  EXPECT_DOUBLE_EQ(even.forward.gemm_flops(), 3.0 * 2 * 4096 * 2 * 4096 * 14336 / 2);
}

// The routing's memory traffic (moe_routing_work), by hand for T 16, D 8, E 4, k 2 at micro-batch 2: n = 32 tokens,
// r = 64 routed rows, 4-byte indices and weights.
//   f32  F gather 2·64·8·4 + 64·4 = 4352, combine 64·8·4 + 32·8·4 + 2·64·4 = 3584: 7936 over 2 kernels
//        I weights' gradient 32·8·4 + 64·8·4 + 2·64·4 = 3584, gather 2·64·8·4 + 2·64·4 = 4608,
//          combine 64·8·4 + 32·8·4 + 64·4 = 3328, dlogits' cast 32·4·(4 + 4) = 1024: 12544 over 4
//   bf16 F 2·64·8·2 + 256 = 2304 and 1024 + 512 + 512 = 2048: 4352
//        I 512 + 1024 + 512 = 2048, 2048 + 512 = 2560, 1024 + 512 + 256 = 1792, 32·4·6 = 768: 7168
// The same on every tp degree and with sequence parallelism (each rank routes every token, D-wide rows); the moe
// block's passes carry them beside the rest, and full recomputation reruns the forward's inside I.
TEST(MoeRoutingWork, GatherAndCombineBytesByHand) {
  MoeConfig c = mixtral();
  c.d_model = 8;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  c.ffn_hidden_size = 16;
  c.seq_len = 16;
  c.n_experts = 4;
  c.top_k = 2;
  const BlockSpec block = moe_block(c);
  const BlockWork f32 = moe_routing_work(block, DType::kF32, 2);
  EXPECT_EQ(f32.forward.stream_bytes, 7936.0);
  EXPECT_EQ(f32.input_grad.stream_bytes, 12544.0);
  EXPECT_EQ(f32.weight_grad.stream_bytes, 0.0);
  EXPECT_EQ(f32.forward.kernels, 2.0);
  EXPECT_EQ(f32.input_grad.kernels, 4.0);
  EXPECT_EQ(f32.weight_grad.kernels, 0.0);
  EXPECT_TRUE(f32.forward.gemms.empty() && f32.input_grad.gemms.empty() && f32.weight_grad.gemms.empty());
  const BlockWork bf16 = moe_routing_work(block, DType::kBF16, 2);
  EXPECT_EQ(bf16.forward.stream_bytes, 4352.0);
  EXPECT_EQ(bf16.input_grad.stream_bytes, 7168.0);
  // Linear in the micro-batch.
  EXPECT_EQ(moe_routing_work(block, DType::kF32, 6).input_grad.stream_bytes, 3 * 12544.0);

  // In the block's passes: the moe block with and without its routing traffic differs by exactly it, at every tp
  // and with sequence parallelism; full recomputation adds the forward's (and its kernels) to I once more.
  for (const int tp : {1, 2}) {
    for (const bool sp : {false, true}) {
      const BlockWork none = block_work(block, DType::kF32, Recompute::kNone, tp, 2, sp);
      const BlockWork full = block_work(block, DType::kF32, Recompute::kFull, tp, 2, sp);
      EXPECT_EQ(full.input_grad.stream_bytes - none.input_grad.stream_bytes, none.forward.stream_bytes) << tp << sp;
      EXPECT_EQ(full.input_grad.kernels - none.input_grad.kernels, none.forward.kernels) << tp << sp;
      EXPECT_EQ(moe_routing_work(block, DType::kF32, 2).forward.stream_bytes, 7936.0);
    }
  }
  // Against the block without routing work, rebuilt from its parts: llama's attention half, the routed experts, the
  // router ([rows, D] x [D, E] and its f32 logits' 2 and 3 passes), the last residual add (3 · rows · D · b).
  PassWork core;
  const BlockWork attention = llama_attention_work(block, DType::kF32, 1, 2, false, core);
  const BlockWork routed = moe_routed_expert_work(block, DType::kF32, 1, 2);
  const BlockWork whole = block_work(block, DType::kF32, Recompute::kNone, 1, 2);
  const double rows = 32, d = 8, e = 4;
  EXPECT_DOUBLE_EQ(whole.forward.stream_bytes, attention.forward.stream_bytes + routed.forward.stream_bytes +
                                                   2 * rows * e * 4 + 7936.0 + 3 * rows * d * 4);
  EXPECT_DOUBLE_EQ(whole.input_grad.stream_bytes, attention.input_grad.stream_bytes +
                                                      routed.input_grad.stream_bytes + 3 * rows * e * 4 + 12544.0 +
                                                      3 * rows * d * 4);
  EXPECT_DOUBLE_EQ(whole.forward.kernels, attention.forward.kernels + routed.forward.kernels + 2 + 2 + 1);
  EXPECT_DOUBLE_EQ(whole.input_grad.kernels, attention.input_grad.kernels + routed.input_grad.kernels + 2 + 4 + 1);
}

}  // namespace
}  // namespace cleave::partition::moe_expert_work_test

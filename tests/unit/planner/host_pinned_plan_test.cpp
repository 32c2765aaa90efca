// The plan search's host line (PlanEstimate::host_pinned_bytes: `cleave plan`'s host pinned column and --json's
// host_pinned_bytes; PlanDetails::host_pinned: `cleave simulate --config`): per pp rank the memory plan's walk
// (run_plan::host_pinned_peak) of the plan's own config, the largest and its rank kept, on the device the plan runs
// on (planned_device: a cuda config, or a cuda profile whatever the config says, as --write writes it); 0 on the
// CPU; never in the peak or under the cap. A dense model on a GPU pins its staged micro-batches and losses row.
// PlannedDevice: the device-only parts of the device memory (the CPU's bf16 widening scratch) follow the same rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/config/config.hpp"
#include "engine/planner/hardware_profile.hpp"
#include "engine/planner/plan_search.hpp"
#include "engine/run_plan/host_memory.hpp"
#include "engine/run_plan/plan.hpp"
#include "support/scratch_dir_test.hpp"

namespace cleave::planner::host_pinned_plan_test {
namespace {

// 3 moe blocks, T 16, E 4, k 2, micro-batches of 2; device.type cpu (the default).
constexpr const char* kMoe = R"({
  "model": {"type": "moe", "vocab_size": 64, "d_model": 32, "n_layers": 3, "n_heads": 4, "seq_len": 16,
            "ffn_hidden_size": 32, "n_experts": 4, "top_k": 2},
  "batch": {"global_batch_size": 8, "micro_batch_size": 2},
  "optimizer": {"type": "adamw"}, "data": {"type": "synthetic"}})";

HardwareProfile a100() { return load_profile(std::string(CLEAVE_SOURCE_DIR) + "/profiles/a100_80gb_sxm.json"); }

PlanChoice choice(int pp, int cp, int ep) {
  PlanChoice c;
  c.pp = pp;
  c.cp = cp;
  c.ep = ep;
  c.dp = std::max(1, ep / cp);  // ep ranks come from dp × cp
  c.micro_batch = 2;
  c.global_batch = 8;
  c.schedule = "1f1b";
  return c;
}

// The walk of the plan's own config, per pp rank (what the estimate must hold).
std::vector<std::int64_t> walk(const config::RunConfig& base, const PlanChoice& c) {
  config::RunConfig config = c.apply_to(base);
  config.resolve(c.world());
  const run_plan::Plan plan =
      run_plan::make_plan(config, static_cast<int>(config.resolved_batch().gradient_accumulation_steps), 0);
  std::vector<std::int64_t> out;
  for (int r = 0; r < c.pp; ++r) out.push_back(run_plan::host_pinned_peak(plan, config, r));
  return out;
}

TEST(PlanHostPinned, ACudaProfilePlansTheMoeStagingPerRank) {
  const config::RunConfig base = config::parse_config(kMoe, "<string>", {});
  const HardwareProfile gpu = a100();
  ASSERT_EQ(gpu.device_type, DeviceType::kCuda);
  for (const PlanChoice& c : {choice(1, 2, 1), choice(1, 1, 2), choice(1, 2, 2), choice(2, 1, 1)}) {
    SCOPED_TRACE(c.layout());
    PlanDetails details;
    const PlanEstimate e = estimate_plan(base, "<string>", {}, c, gpu, SearchOptions{c.world(), 0}, &details);
    ASSERT_TRUE(e.valid) << e.reason;
    const std::vector<std::int64_t> want = walk(base, c);
    EXPECT_EQ(details.host_pinned, want);
    const auto largest = std::max_element(want.begin(), want.end());
    EXPECT_GT(*largest, 0);
    EXPECT_EQ(e.host_pinned_bytes, *largest);
    EXPECT_EQ(e.host_pinned_rank, static_cast<int>(largest - want.begin()));
    // Host memory: the same device peak as the same plan on a CPU profile, which pins nothing.
    HardwareProfile cpu = gpu;
    cpu.device_type = DeviceType::kCpu;
    PlanDetails cpu_details;
    const PlanEstimate on_cpu = estimate_plan(base, "<string>", {}, c, cpu, SearchOptions{c.world(), 0}, &cpu_details);
    EXPECT_EQ(on_cpu.host_pinned_bytes, 0);
    EXPECT_EQ(cpu_details.host_pinned, std::vector<std::int64_t>(static_cast<std::size_t>(c.pp), 0));
    EXPECT_EQ(on_cpu.peak_bytes, e.peak_bytes);
  }
  // A config that says cuda is a GPU run whatever the profile.
  const config::RunConfig cuda = config::parse_config(kMoe, "<string>", {"device.type=cuda"});
  HardwareProfile cpu = gpu;
  cpu.device_type = DeviceType::kCpu;
  EXPECT_EQ(estimate_plan(cuda, "<string>", {}, choice(1, 2, 2), cpu, SearchOptions{2, 0}).host_pinned_bytes,
            walk(base, choice(1, 2, 2))[0]);
}

class PlanHostPinnedSearch : public testing::ScratchDirTest {
 protected:
  PlanHostPinnedSearch() : ScratchDirTest("cleave_host_pinned_test_") {}
};

TEST_F(PlanHostPinnedSearch, EveryRankedPlanOnAGpuHasItAndNoneOnACpu) {
  const SearchResult moe = search_plans(write("moe.json", kMoe), {}, a100(), SearchOptions{2, 0});
  ASSERT_FALSE(moe.ranked.empty());
  for (const PlanEstimate& e : moe.ranked) EXPECT_GT(e.host_pinned_bytes, 0) << e.choice.layout();
  const SearchResult gpt = search_plans(
      write("gpt.json", R"({"model": {"type": "gpt", "vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 4,
                                       "seq_len": 16}, "batch": {"global_batch_size": 8}, "data": {"type": "synthetic"}})"),
      {}, a100(), SearchOptions{2, 0});
  ASSERT_FALSE(gpt.ranked.empty());
  // A dense model pins its staged micro-batches and the losses row (run_plan/host_memory.hpp).
  for (const PlanEstimate& e : gpt.ranked) EXPECT_GT(e.host_pinned_bytes, 0) << e.choice.layout();
  HardwareProfile cpu = a100();
  cpu.device_type = DeviceType::kCpu;
  const SearchResult on_cpu = search_plans(write("moe_cpu.json", kMoe), {}, cpu, SearchOptions{2, 0});
  ASSERT_FALSE(on_cpu.ranked.empty());
  for (const PlanEstimate& e : on_cpu.ranked) EXPECT_EQ(e.host_pinned_bytes, 0) << e.choice.layout();
}

// The device a plan is for (planned_device) decides the whole memory plan, not only the host line: a bf16 config
// that says cpu, planned on a GPU's profile, is a GPU run (as --write writes it), so its device peak has no CPU
// widening scratch and is the cuda config's to the byte; on a CPU profile the same config counts the scratch.
TEST(PlannedDevice, TheMemoryPlanIsTheDeviceThePlanRunsOn) {
  const HardwareProfile gpu = a100();
  HardwareProfile cpu = gpu;
  cpu.device_type = DeviceType::kCpu;
  const std::string gpt = R"({"model": {"type": "gpt", "vocab_size": 256, "d_model": 64, "n_layers": 2,
      "n_heads": 4, "seq_len": 32}, "batch": {"global_batch_size": 8, "micro_batch_size": 2},
      "device": {"precision": "bf16"}, "optimizer": {"type": "adamw"}, "data": {"type": "synthetic"}})";
  const config::RunConfig says_cpu = config::parse_config(gpt, "<string>", {});
  const config::RunConfig says_cuda = config::parse_config(gpt, "<string>", {"device.type=cuda"});
  EXPECT_EQ(planned_device(says_cpu, gpu), DeviceType::kCuda);
  EXPECT_EQ(planned_device(says_cuda, cpu), DeviceType::kCuda);
  EXPECT_EQ(planned_device(says_cpu, cpu), DeviceType::kCpu);
  for (const PlanChoice& c : {choice(1, 1, 1), choice(2, 1, 1)}) {
    SCOPED_TRACE(c.layout());
    const PlanEstimate planned = estimate_plan(says_cpu, "<string>", {}, c, gpu, SearchOptions{c.world(), 0});
    const PlanEstimate cuda = estimate_plan(says_cuda, "<string>", {}, c, gpu, SearchOptions{c.world(), 0});
    ASSERT_TRUE(planned.valid && cuda.valid) << planned.reason << cuda.reason;
    EXPECT_EQ(planned.peak_by_category, cuda.peak_by_category);
    EXPECT_EQ(planned.peak_bytes, cuda.peak_bytes);
    EXPECT_EQ(planned.host_pinned_bytes, cuda.host_pinned_bytes);
    const PlanEstimate on_cpu = estimate_plan(says_cpu, "<string>", {}, c, cpu, SearchOptions{c.world(), 0});
    const auto workspace = static_cast<std::size_t>(MemoryCategory::kWorkspace);
    EXPECT_GT(on_cpu.peak_by_category[workspace], planned.peak_by_category[workspace]);  // the widening scratch
  }
}

}  // namespace
}  // namespace cleave::planner::host_pinned_plan_test

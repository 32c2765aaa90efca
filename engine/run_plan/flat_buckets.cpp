// See flat_buckets.hpp.
#include "engine/run_plan/flat_buckets.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "engine/comm/gradient_bucket_layout.hpp"
#include "pipeline/action.hpp"
#include "partition/param_tensors.hpp"

namespace cleave::run_plan {
namespace {

// The rank's stages in the order their last weight pass (W or B) runs.
std::vector<int> stages_by_final_weight_pass(const Plan& plan, int pp_rank) {
  std::map<int, std::size_t> last;
  const auto& actions = plan.schedule.ranks[static_cast<std::size_t>(pp_rank)];
  for (std::size_t i = 0; i < actions.size(); ++i) {
    if (pipeline::frees_stash(actions[i].kind)) last[actions[i].stage] = i;
  }
  std::vector<int> order;
  for (const auto& [stage, index] : last) order.push_back(stage);
  std::sort(order.begin(), order.end(), [&last](int a, int b) { return last[a] < last[b]; });
  return order;
}

comm::GradientSpec spec_of(int block, std::size_t tensor, std::int64_t numel) {
  comm::GradientSpec spec;
  spec.name = "block " + std::to_string(block) + " tensor " + std::to_string(tensor);
  spec.shape = Shape{numel};
  return spec;
}

// Adds a layout's elements and its rank-0 shards (shard b of n elements: ceil(n / group) elements, at most n), and
// its in-order trades' excess (FlatBuckets::trade_excess; sharded, each bucket is a multiple of the group).
void add_layout(FlatBuckets& flat, const std::vector<comm::GradientSpec>& specs, double bucket_mib, bool sharded,
                int group) {
  if (specs.empty()) return;
  std::int64_t freed = 0;  // what the trades before this bucket's freed: their buckets less their shards
  for (const comm::GradientBucket& b : comm::lay_out_buckets(specs, bucket_mib, false, sharded ? group : 1).buckets) {
    const std::int64_t shard = std::min(b.numel, (b.numel + group - 1) / group);
    flat.total += b.numel;
    flat.shard += shard;
    flat.trade_excess = std::max(flat.trade_excess, shard - freed);
    freed += b.numel - shard;
  }
}

}  // namespace

// Ready order (DataParallel's ready_order_of): stages by their last weight pass, each stage's parameters last to
// first (blocks last to first, a block's tensors last to first); a tied table held by both of its blocks at its last
// occurrence, i.e. with the embedding. A tied table split over pp ranks and, at ep > 1, the routed experts leave the
// main order for their own bucketers.
FlatBuckets flat_buckets(const Plan& plan, int pp_rank, int tp, int dp, int ep, double bucket_mib, bool sharded) {
  const auto& spec = plan.spec;
  const bool tied = !spec.tied_parameters.empty();
  const std::vector<int> stages = stages_by_final_weight_pass(plan, pp_rank);
  bool embedding = false, head = false;
  for (int stage : stages) {
    const auto& range = plan.partition.stages[static_cast<std::size_t>(stage)];
    for (int b = range.begin; b < range.end; ++b) {
      embedding = embedding || spec.blocks[static_cast<std::size_t>(b)].kind == partition::BlockKind::kEmbedding;
      head = head || spec.blocks[static_cast<std::size_t>(b)].kind == partition::BlockKind::kLmHead;
    }
  }
  const bool split_table = tied && !(embedding && head);
  std::vector<comm::GradientSpec> main, table, experts;
  int table_at = -1;  // the shared table's index in `main`
  for (int stage : stages) {
    const auto& range = plan.partition.stages[static_cast<std::size_t>(stage)];
    for (int b = range.end; b-- > range.begin;) {
      const std::vector<partition::ParamTensor> tensors =
          partition::block_param_tensors(spec.blocks[static_cast<std::size_t>(b)], tp);
      for (std::size_t t = tensors.size(); t-- > 0;) {
        const partition::ParamTensor& tensor = tensors[t];
        if (tied && tensor.role == partition::ParamRole::kTokenTable) {
          if (split_table) {
            table = {spec_of(b, t, tensor.numel)};
            continue;
          }
          if (table_at >= 0) main.erase(main.begin() + table_at);
          table_at = static_cast<int>(main.size());
        }
        if (ep > 1 && tensor.role == partition::ParamRole::kRoutedExperts) {
          experts.push_back(spec_of(b, t, tensor.numel / ep));
        } else {
          main.push_back(spec_of(b, t, tensor.numel));
        }
      }
    }
  }
  FlatBuckets flat;  // each bucketer's trades from its own full buffers: their excesses are compared, not summed
  add_layout(flat, main, bucket_mib, sharded, dp);
  FlatBuckets split;
  add_layout(split, table, bucket_mib, sharded, dp);
  flat.total += split.total;
  flat.shard += split.shard;
  flat.trade_excess = std::max(flat.trade_excess, split.trade_excess);
  FlatBuckets expert;
  add_layout(expert, experts, bucket_mib, sharded, dp / ep);
  flat.trade_excess = std::max(flat.trade_excess, expert.trade_excess);
  flat.total += expert.total;
  flat.shard += expert.shard;
  flat.expert_total = expert.total;
  flat.expert_shard = expert.shard;
  return flat;
}

}  // namespace cleave::run_plan

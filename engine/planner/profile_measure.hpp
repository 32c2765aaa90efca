// The measurements behind `cleave profile` (engine/cli/profile.cpp):
//  - measure_blocks times, with the real layers and kernels, every distinct block shape of a model
//    (partition/measured_costs.hpp: block_shape_key) at each requested tensor-parallel width and micro-batch size:
//    forward, input gradient and weight gradient of tp rank 0's shard (in fp32, or under bf16 mixed precision with
//    bf16 activations and weight working copies, as the trainer runs it): `rounds` passes over every measurement,
//    each the median of `repeats` runs after a warm-up, and the median of the rounds. The rounds spread each
//    measurement over the whole profile: a neighbour's burst of load on a shared machine slows one round of
//    every measurement, not every run of one (one pass had put 30% between two profiles of the same machine).
//    The caches are evicted before each timed pass unless the request says otherwise. A shard's tp collectives
//    are not run (the layers get a communicator of the right width whose collectives complete without moving
//    data); the collectives are timed by measure_collectives. Under
//    mpirun every rank times the same blocks at the same moments (so cores are shared as in training) and the
//    result is the mean over ranks.
//  - measure_collectives times point-to-point (ping-pong between rank pairs, one way = half a round trip)
//    and all_reduce / reduce_scatter / all_gather on groups of 2, 4, ... consecutive ranks and on the whole
//    world, all groups at once, at message sizes from 4 KiB to 4 MiB, and fits latency + bytes / bandwidth
//    to the medians (the slowest rank's).
//  - measure_sync_wait (engine/planner/sync_wait.hpp) times what a meeting of the ranks costs beyond the collective,
//    per second of compute before it.
// Invariant: only one block is built at a time (a model too large for one rank can be profiled), and every
// rank takes part in the same sequence of collectives (no rank returns early).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "kernels/ops/context.hpp"
#include "layers/layer.hpp"
#include "partition/measured_costs.hpp"
#include "partition/model_spec.hpp"

namespace cleave::planner {

struct BlockProfileRequest {
  std::vector<int> tp_widths = {1};
  std::vector<std::int64_t> micro_batches = {1};
  int repeats = 5;
  int rounds = 5;  // passes over every measurement; a measurement is the median of its rounds' medians
  ops::Precision precision = ops::Precision::kFp32;  // kBf16: mixed precision, as the trainer runs it
  // Evict the caches before every timed pass (CacheEvictor), and time each pass a second time at once, warm:
  // the blocks carry both tables. A large model's step touches far more than the last-level cache (every block's
  // weights, gradients and stashes), so its blocks run cold; a small stage's working set can stay in cache
  // between micro-batches (the d256 GPT's block ran 9-29% slower cold than warm at micro-batch 1, 0-8% at 8).
  // The planner takes from each table by how much of the rank's working set fits its share of the cache
  // (MeasuredCosts::warm_fraction). false: warm only (`cleave profile --warm-caches`), one table.
  bool cold_caches = true;
  // Called after each measurement (one block shape at one tp width and micro-batch size, in one round) with the
  // measurements done, their total over all rounds and what was measured ("transformer_block d32 ... tp 2, micro-batch
  // 4, round 1/5"); empty = silent. `cleave profile` prints a progress line from it.
  std::function<void(int done, int total, const std::string& what)> progress;
};

// The last-level cache of the CPU this process runs on: its size and how many CPUs share it (sysfs, else
// sysconf with every CPU sharing it; 0 bytes when neither knows).
struct CacheInfo {
  std::int64_t bytes = 0;
  int shared_by_cpus = 1;
};
CacheInfo last_level_cache();
// Each rank's share of that cache when `ranks_on_node` ranks of `threads_per_rank` threads run: the cache over the
// ranks that share one (at most its CPUs / threads per rank).
std::int64_t cache_bytes_per_rank(const CacheInfo& cache, int ranks_on_node, int threads_per_rank);

// Reads a buffer twice `cache_bytes` (64 MiB when 0, at least 8 MiB, at most 256 MiB) so that what a timed pass
// touches next comes from memory, as in a training step. Given a rank's share of the last-level cache: the node's
// ranks time the same blocks at once, so together they read twice the whole cache before each pass, as one rank
// alone does with the whole cache, and no rank reads it all (on a 105 MiB cache, two ranks read 105 MiB each
// instead of 210: the eviction was most of `cleave profile`'s time there).
class CacheEvictor {
 public:
  explicit CacheEvictor(std::int64_t cache_bytes);
  void evict();
  std::int64_t bytes_read() const { return static_cast<std::int64_t>(buffer_.size() * sizeof(float)); }

 private:
  std::vector<float> buffer_;
  volatile float sink_ = 0;  // keeps the reads
};

// Each of `values` replaced by its mean over the ranks of `comm` (one all-reduce, in f32; unchanged without a
// communicator or with one rank): how every profile measurement averages its ranks.
void mean_over_ranks(std::vector<double>& values, comm::Communicator* comm);

// A block's input of distinct random values (a fixed seed, so profiles are reproducible): token ids uniform in
// [0, vocab) for an i32 input, else standard normal values in `dtype` (f32 or bf16). Identical tokens would route
// every token of a moe block to the same k experts (k of E groups holding every row), a degenerate routing no
// trained model runs; distinct ones through a fresh router spread over the experts.
Tensor random_input(const Shape& shape, DType dtype, std::int64_t vocab = 0);

// Medians of `repeats` timed forward / backward_input / backward_weight runs of `layer` on `x` with output
// gradient `dy`, after one untimed run (first touch of buffers, thread pool start). `output`, when given,
// receives the last forward's output. `evictor`, when given, evicts the caches before each timed pass; then
// `warm`, when given, receives the medians of the same passes run again right after each cold one. `targets`:
// a loss block's targets (ignored by other blocks).
partition::BlockTimes time_block(layers::Layer& layer, const Tensor& x, const Tensor& dy, layers::Context& ctx,
                                 int repeats, Tensor* output = nullptr, CacheEvictor* evictor = nullptr,
                                 partition::BlockTimes* warm = nullptr, const Tensor& targets = {});

// Appends to costs.blocks; `comm` (null = this process alone) averages the ranks' medians. With cold caches the
// evictor reads twice costs.cache_bytes_per_rank (the whole last-level cache when 0).
void measure_blocks(partition::MeasuredCosts& costs, const partition::ModelSpec& spec, const BlockProfileRequest& request,
                    comm::Communicator* comm);

// Sets costs' optimizer seconds per parameter, the parts of the trainer's OPTIMIZER_STEP that are not collectives
// (engine/train/step_tail.hpp), each as the trainer calls it, one multi-tensor call over `params` f32 elements in
// several tensors: AdamW and SGD (with and without momentum) updates, the exact gradient norm's sum of squares and
// the clip's scale; every rank at once (`comm`: null = this process alone), median over `rounds` of the median of
// `repeats`. Under kBf16 each update includes the refresh of the bf16 working copies, as in training.
void measure_optimizer(partition::MeasuredCosts& costs, std::int64_t params, int repeats, int rounds,
                       comm::Communicator* comm, ops::Precision precision = ops::Precision::kFp32);

// Sets costs.p2p and the collective fits. Needs comm.size() >= 2.
// The group sizes the profile times its collectives (and the expert exchange) on: 2, 4, ... consecutive ranks that
// divide the world, and the whole world.
std::vector<int> profile_group_sizes(int world_size);

void measure_collectives(partition::MeasuredCosts& costs, comm::Communicator& comm, int repeats = 10);

}  // namespace cleave::planner

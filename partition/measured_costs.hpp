// MeasuredCosts: what `cleave profile` measured on a machine, carried inside a hardware profile:
//  - per block shape, tensor-parallel width and micro-batch size, the forward, input-gradient and
//    weight-gradient times of one tp rank's shard (the real layers, the real kernels, every rank of the
//    job busy at the same time as in training; tp collectives excluded, they are the next item), with the
//    caches evicted before each pass and, optionally, again warm; with the rank's share of the last-level
//    cache, a plan takes from the two tables by how much of its working set fits (warm_fraction);
//  - per collective (p2p, all_reduce, reduce_scatter, all_gather) and group size, an alpha-beta fit of
//    timed runs: seconds = latency + bytes / bandwidth, `bytes` being the buffer each rank passes in;
//  - the wait at a synchronization per second of compute before it (sync_wait_per_compute).
// Invariant: a lookup never invents a measurement for a block shape or tp width that was not measured (it
// says so, naming the profile and what it holds); between and beyond measured micro-batch sizes times are
// interpolated linearly (a block's time is affine in the micro-batch: a fixed per-call part plus
// per-sample work), which the profile's README states.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/dtype.hpp"
#include "engine/core/enum_names.hpp"
#include "partition/collective.hpp"  // Collective: the collectives a profile fits
#include "partition/model_spec.hpp"

namespace cleave::partition {

struct MeasuredBlock {
  std::string shape;             // block_shape_key(): "transformer_block d256 h4 ff1024 T64"
  int tp = 1;
  std::int64_t micro_batch = 1;
  double forward_s = 0, input_grad_s = 0, weight_grad_s = 0;  // caches cold (or warm: `cleave profile --warm-caches`)
  // The same passes run again at once, the block's weights and data still in cache; 0 = not measured.
  double warm_forward_s = 0, warm_input_grad_s = 0, warm_weight_grad_s = 0;
  // A block with routed experts: the rows its router sent to each expert per micro-batch while it was timed
  // (distinct random tokens through a fresh router: what the time holds); empty for other blocks. File key
  // "routed_rows" (absent from profiles written before 2026-11-30 (d), which timed identical tokens: k experts
  // held every row).
  std::vector<std::int64_t> routed_rows{};
  bool has_warm() const { return warm_forward_s > 0; }
};

struct AlphaBeta {
  int ranks = 2;                 // group size (2 for p2p: one sender, one receiver)
  double latency_s = 0;          // alpha
  double bandwidth_Bps = 0;      // 1 / beta, bytes per second of each rank's buffer
  double seconds(double bytes) const { return latency_s + bytes / bandwidth_Bps; }
};

struct BlockTimes {
  double forward_s = 0, input_grad_s = 0, weight_grad_s = 0;
};

// The routed experts of a moe block shape alone (planner::measure_expert_rows): each pass's gate, up and down grouped
// GEMMs and the SwiGLU between them, timed at several routed-row counts spread over the block's E experts (E GEMMs per
// projection at each count, as one rank runs them at any ep: ep sources x E / ep experts), fitted as intercept + rows x
// per_row. per_row is what one more routed row costs a pass. Recorded, not priced yet: the planner prices the busiest
// ep rank's extra rows by the FLOP share (docs/planner.md, "Why the measured cost per routed row is not priced yet").
// Seconds; file key "expert_rows".
struct MeasuredExpertRows {
  std::string shape;  // block_shape_key() of the moe block
  int tp = 1;
  std::vector<std::int64_t> rows;  // the routed-row counts timed
  BlockTimes intercept, per_row;   // seconds, and seconds per row, per pass
};

// The host's routing of a moe block alone (planner::measure_host_routing): layers::route (softmax or sigmoid over the E
// experts, top-k, the rows grouped per expert) in the forward, route again and router_backward in the input
// gradient (moe_mlp.cpp re-routes from the stashed logits), on random logits, timed at several token counts and fitted
// as intercept + tokens x per_token, per pass (the weight gradient runs no routing: 0). Priced where no block table
// holds it (planner, host_routing_s); file key "host_routing".
struct MeasuredHostRouting {
  std::int64_t experts = 0, top_k = 0;
  std::vector<std::int64_t> tokens;  // the token counts timed
  BlockTimes intercept, per_token;   // seconds, and seconds per token, per pass
};

struct MeasuredCosts {
  int ranks = 1;                 // ranks that ran the measurement together
  int threads_per_rank = 1;
  DType dtype = DType::kF32;     // the compute dtype the blocks were timed in (device.precision): f32 or bf16
  std::vector<MeasuredBlock> blocks;
  std::optional<AlphaBeta> p2p;
  std::vector<AlphaBeta> all_reduce, reduce_scatter, all_gather;
  // Seconds per parameter of one optimizer update on this rank (every rank updating at once); 0 = not
  // measured. Keys: "adamw", "sgd" (no momentum), "sgd_momentum".
  double adamw_s_per_param = 0, sgd_s_per_param = 0, sgd_momentum_s_per_param = 0;
  // Seconds per gradient element of the rest of the trainer's OPTIMIZER_STEP (engine/train/step_tail.hpp): the
  // exact gradient norm's sum of squares (every step) and the clipping scale (steps whose norm exceeds
  // optimizer.grad_clip); 0 = not measured (a profile from before they were timed). Keys "grad_norm", "grad_clip".
  double grad_norm_s_per_param = 0, grad_clip_s_per_param = 0;
  // Seconds a rank waits at a synchronization with its peers per second of compute it ran since the previous one,
  // beyond the collective itself, with the same work on every rank: the peers' lost time (a core taken by other
  // work on a shared machine, a rank's own progress thread, noise) that the rank waiting sees. Measured over the
  // profile's ranks (measure_sync_wait, engine/planner/profile_measure.hpp); 0 = not measured (a profile from before
  // it was timed, or one rank). Key "sync_wait_per_compute".
  double sync_wait_per_compute = 0;
  // The mean over the median of the same short compute (0.1-2 ms chunks), less 1, measured with it: the lost time
  // slices that the block tables' medians leave out and a training step pays (key "compute_stretch"; 0 = not
  // measured).
  double compute_stretch = 0;
  // The same compute run as one long stream without a meeting (about 50 ms of GEMMs back to back on every rank at
  // once), its mean time over the short chunks' median, less 1: a rank that never blocks gets only its fair share of
  // a core that other work shares, where one that blocks every millisecond is woken ahead of that work. Priced on
  // plans whose ranks meet nobody inside a step (planner::streams_the_step). Key "stream_stretch"; 0 = not measured.
  double stream_stretch = 0;
  // Seconds every meeting waits beyond the collective itself whatever the compute before it (the intercept of the
  // same measurement's fit, wait = per meeting + sync_wait_per_compute × compute: waking the peer's progress, the
  // first touch of the exchange's buffers after compute); 0 = not measured. Key "sync_wait_per_meeting_us".
  double sync_wait_per_meeting_s = 0;
  // The count exchange (comm::exchange_counts, a small all-to-all of int64 counts, the expert dispatch's first
  // exchange) over `count_exchange_ranks` ranks, timed back to back: its own latency (the 10th percentile: its fast
  // mode, both ranks there), mean over the ranks;
  // 0 = not measured. Key "count_exchange": {"ranks", "latency_us"}.
  double count_exchange_s = 0;
  int count_exchange_ranks = 0;
  // The expert dispatch's row exchange itself (comm all_to_all_v, as layers/moe/expert_dispatch.cpp calls it: every
  // rank's rows split evenly over the group, its own share included, every rank sending and receiving at once) on
  // groups of 2, 4, ... consecutive ranks and the whole world, all groups at once, as the trainer calls it after a
  // pass's compute, at the model's own sizes (planner::measure_ep_exchange: each rank's routed rows of a
  // micro-batch, half and twice them), fitted per group size as latency + bytes per rank / bandwidth: what the
  // reduce-scatter's and ping-pong's fits leave out of the trainer's exchange. Empty: not measured (a model without
  // routed experts, one rank, a profile written before 2026-12-01 (m)). Key "ep_exchange": [{"ranks",
  // "latency_us", "bandwidth_GBps"}, ...].
  std::vector<AlphaBeta> ep_exchange;
  const AlphaBeta* ep_exchange_of(int ranks) const {
    for (const AlphaBeta& f : ep_exchange) {
      if (f.ranks == ranks) return &f;
    }
    return nullptr;
  }
  // What sharing a core costs (planner::measure_time_sharing): two of the profile's ranks pinned to one core, each
  // rank's GEMM stream there over the same on its own core (`compute_ratio`, `ranks_per_core` ideally), and a
  // ping-pong between them, one message's handoff with the waiter yielding between polls as ranks that outnumber the
  // cores poll (`handoff_s`) and spinning (`handoff_spin_s`). Priced only for layouts with more ranks than cores;
  // absent (nullopt) = not measured, such layouts priced by their share of the cores alone. Key "time_sharing":
  // {"ranks_per_core", "compute_ratio", "handoff_us", "handoff_spin_us", "method"}.
  struct TimeSharing {
    int ranks_per_core = 2;
    double compute_ratio = 0, handoff_s = 0, handoff_spin_s = 0;
    std::string method;  // how it was measured, as written by the profile (for the reader)
  };
  std::optional<TimeSharing> time_sharing;
  // The last-level cache each rank of the measurement had to itself (the cache over the ranks sharing it); 0 =
  // unknown. With it and the warm tables a plan's block times depend on whether its working set fits
  // (warm_fraction below).
  std::int64_t cache_bytes_per_rank = 0;
  // Per moe block shape and tp width, its routed experts' time per routed row (MeasuredExpertRows); empty = not
  // measured (a profile from before it was, or a model without routed experts).
  std::vector<MeasuredExpertRows> expert_rows;
  // Per (experts, top_k) of the model's moe blocks, the host's routing time (MeasuredHostRouting); empty = not
  // measured.
  std::vector<MeasuredHostRouting> host_routing;

  bool has_blocks() const { return !blocks.empty(); }
  // The expert-row fit of `shape` at tp width `tp`, or null.
  const MeasuredExpertRows* expert_rows_of(const std::string& shape, int tp) const;
  // The host-routing fit of (experts, top_k), else the one with the most experts (its per-token time scaled by
  // experts / its experts: a token's scores and top-k are linear in E), else null.
  const MeasuredHostRouting* host_routing_of(std::int64_t experts, std::int64_t top_k) const;
  // Whether `shape` was measured at tp width `tp` (any micro-batch).
  bool covers(const std::string& shape, int tp) const;
  // Times of `block` at (tp, micro_batch); throws Error naming `profile_name` if the shape or width is absent.
  // `warm` in [0, 1]: the share of the gap between the cold and the warm tables to take off (entries measured
  // without a warm table keep their one time).
  BlockTimes block_times(const BlockSpec& block, int tp, std::int64_t micro_batch, const std::string& profile_name,
                         double warm = 0.0) const;
  // How much of a rank's block data stays in its cache between uses, for a rank whose step touches
  // `working_set_bytes` (parameters, gradients, stashes, workspace) over and over: cache / working set, at most 1;
  // 0 where the cache size is unknown. A linear stand-in for the hit rate, between the cold tables (nothing left
  // in cache, a working set far larger) and the warm ones (everything still there).
  double warm_fraction(std::int64_t working_set_bytes) const;
  // The fits of `op`, one per group size.
  std::vector<AlphaBeta>& fits(Collective op);
  const std::vector<AlphaBeta>& fits(Collective op) const;
  // The fit of `op` for `ranks` members, or null.
  const AlphaBeta* collective(Collective op, int ranks) const;
};

// A block's identity for the tables: its kind and every size its cost depends on.
std::string block_shape_key(const BlockSpec& block);

// Least-squares fit of seconds = a + bytes * b over (bytes, seconds) points; an intercept below 0.1 us (noise)
// is floored there with the slope refitted through the origin, and b has a positive floor, so the fit is
// usable even from noisy points. Needs two or more distinct sizes.
AlphaBeta fit_alpha_beta(const std::vector<std::pair<double, double>>& bytes_seconds, int ranks);

// A dtype in a profile file ("measured.dtype", "gemm_measured[].dtype"): "f32" or "bf16", the names of
// engine/core/dtype.hpp and the one spelling written. One old spelling is read: "fp32" means f32 (`cleave
// profile` wrote device.precision's name into "measured.dtype" before; profiles/README.md).
std::string_view profile_dtype_name(DType dtype);
// Throws Error naming `where` unless `value` is one of those strings.
DType parse_profile_dtype(const nlohmann::json& value, const std::string& where);

// Numbers are written to 9 significant digits, so writing what was read gives the same text (round trip).
double file_number(double value);
nlohmann::json measured_to_json(const MeasuredCosts& costs);
// Reads the "measured" object of a profile file (a part of load_profile, partition/hardware_profile.hpp, the one
// reader of profile files); throws Error naming `file` and the key.
MeasuredCosts measured_from_json(const nlohmann::json& node, const std::string& file);
// The one check that a profile's block table fits a config: throws Error naming `source` unless the blocks were
// timed in `dtype` and every block shape of `spec` was measured, at tensor-parallel width `tp` (kAnyWidth: at
// some width, as the planner needs before it picks one). A shape measured at no width means another model.
inline constexpr int kAnyWidth = 0;
void check_measured_covers(const MeasuredCosts& costs, const ModelSpec& spec, DType dtype, int tp, const std::string& source);

}  // namespace cleave::partition

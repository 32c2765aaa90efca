// The Layer interface (docs/architecture.md): explicit forward, split backward, per-micro-batch stashes.
//
// Invariants every layer keeps:
//  - forward() writes what backward needs into the micro-batch's Stash and nothing into the layer itself,
//    so any number of micro-batches may be in flight (the schedule decides how many).
//  - backward_input() returns dx and keeps in the stash what backward_weight() needs (e.g. dy).
//  - backward_weight() ACCUMULATES (+=) into each Param's grad and then releases the stash.
//  - backward() == backward_input() followed by backward_weight().
// Outputs and stash tensors come from ctx.allocator (category kActivations), so peak memory follows the
// schedule and the allocator's counters show it.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/allocator.hpp"
#include "engine/core/stream.hpp"
#include "engine/core/tensor.hpp"
#include "kernels/ops/context.hpp"
#include "layers/context_parallel/cp_layout.hpp"

namespace cleave::comm {
class Communicator;
class Work;
}

namespace cleave::layers {

class RouterLog;  // layers/moe/router_log.hpp
class CommWaiter;  // layers/comm_wait.hpp

// How a parameter is split across tensor-parallel ranks. dim = -1: replicated.
//
// The split dimension (extent E = logical[dim]) is made of `groups` equal blocks of G = E / groups rows
// (groups must divide E); each block is cut into `parts` pieces of P = ceil(G / parts) rows and the shard
// holds piece `index` of every block, blocks in order. So the shard's shape is `logical` with dim replaced
// by groups * P. Examples: a column-parallel weight [out, in] is {dim 0, groups 1}; the fused attention
// QKV weight [3D, D] with rows q|k|v is {dim 0, groups 3}: tp rank r holds rows of its heads from q, then
// from k, then from v. When parts does not divide G (a vocabulary table split over tp), the last pieces
// run past the block's end: those rows are padding, zero-initialised, never part of the logical tensor,
// and their gradient stays zero. layers/parallel/shard.hpp maps between shards and logical tensors.
struct ShardSpec {
  int dim = -1;               // dimension of the logical tensor that is split
  int parts = 1;              // tp size
  int index = 0;              // tp rank
  int groups = 1;             // equal blocks along dim, each split into `parts` (3 for a fused QKV weight)
  Shape logical;              // shape of the unsharded tensor (== value's shape when replicated)
  // Expert parallelism × tensor parallelism (an expert tensor [E, ...] split over tp along dim >= 1): the stored
  // tensor is piece ep_index of ep_parts equal contiguous pieces of dim 0 of the tp shard above (this ep rank's
  // experts, each still split over tp). ep_parts 1: the whole tp shard. An ep-only split (tp 1) is a plain
  // {dim 0, ep parts} spec instead, so these stay 1 and 0 there.
  int ep_parts = 1;
  int ep_index = 0;
};

struct Param {
  std::string name;  // logical name, identical in every layout: "blocks.3.attn.qkv.weight"
  Tensor value;      // kParameters, f32: the master weights the optimizer updates
  Tensor grad;       // kGradients, f32, same shape; accumulated by backward_weight
  // Mixed precision (ops::Precision::kBf16): the bf16 copy of `value` the forward and backward read, refreshed
  // after every optimizer step (kParameters). Undefined in fp32 runs.
  Tensor working;
  ShardSpec shard;
  bool weight_decay = true;  // false for biases, norms and position tables
  // Expert parallelism (parallel.expert_model_parallel_size = ep > 1): ep > 1 marks an expert tensor split over
  // the ep group (ShardSpec dim 0, ep parts: this rank's experts; with tp > 1 the tp split's ep_parts). Its
  // gradient is reduced over the expert-dp group, not dp × cp, and its weight gradient gets one contribution per
  // ep source rank ("lane"). Deterministic
  // mode's accumulator (pipeline/ordered_grad_accumulator.hpp) then hands backward_weight a grad of ep × the
  // value's rows, [ep · rows, ...]: the layer adds source s's contribution into rows [s · rows, (s + 1) · rows),
  // so each lane is summed over micro-batches canonically before the lanes are (ep 1's order); a grad of the
  // value's shape (plain mode) takes every lane's contribution in lane order.
  int ep_size = 1;

  // What compute reads: the working copy when there is one, else the master value.
  const Tensor& compute() const { return working.defined() ? working : value; }
};

struct Stash;

// A stash's children: a vector of stashes whose clear() empties each child in place and keeps it, so a stash used
// again for the next micro-batch (pipeline/stage_module.hpp keeps them) makes its children, their tensor lists and
// theirs again without operator new. Elements [0, size()) are the live children; the kept ones past them are empty.
class StashChildren {
 public:
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  Stash& operator[](std::size_t i);
  const Stash& operator[](std::size_t i) const;
  Stash* begin();
  Stash* end();
  const Stash* begin() const;
  const Stash* end() const;
  void resize(std::size_t n);  // n children: those past the old size empty
  void clear();                // every child cleared and kept

 private:
  std::vector<Stash> slots_;
  std::size_t size_ = 0;
};

// What one micro-batch's forward leaves behind for its backward.
struct Stash {
  std::vector<Tensor> tensors;
  StashChildren children;  // stashes of sub-layers, in a fixed order chosen by the composite layer
  // Exchanges the forward posted and the backward completes: non-blocking collectives whose result only the
  // backward reads (the moe block's count exchange under context parallelism, layers/moe/balance_exchange.hpp);
  // their buffers are among `tensors`. Dropping one still in flight waits for it (comm::Work's destructor), so a
  // stash dropped without its backward stays correct even where its layer posted regardless of backward_follows.
  std::vector<std::shared_ptr<comm::Work>> in_flight;
  // False when no backward will read this stash: the first forward of a recomputed layer (layers/recomputed.hpp,
  // whose rerun rebuilds the stash its backward reads) and evaluation's forwards. A layer may then skip what only
  // its backward reads (the moe block's count exchange is not posted), never what its output needs. Set by
  // whoever makes the stash, before the forward; kept by clear() and handed to the children by reset().
  bool backward_follows = true;
  // Empties the stash (keeps backward_follows and, for reuse, the memory of its lists and children). Every exchange
  // in flight here and in the children completes before any buffer is released (layers/stash.cpp), as it may
  // still write into one of them.
  void clear();
  // A composite layer's forward starts with this: clear(), then `n` empty children that inherit backward_follows.
  void reset(std::size_t n) {
    clear();
    children.resize(n);
    for (Stash& child : children) child.backward_follows = backward_follows;
  }
  bool empty() const { return tensors.empty() && children.empty() && in_flight.empty(); }
};

// StashChildren's members need the complete Stash.
inline Stash& StashChildren::operator[](std::size_t i) { return slots_[i]; }
inline const Stash& StashChildren::operator[](std::size_t i) const { return slots_[i]; }
inline Stash* StashChildren::begin() { return slots_.data(); }
inline Stash* StashChildren::end() { return slots_.data() + size_; }
inline const Stash* StashChildren::begin() const { return slots_.data(); }
inline const Stash* StashChildren::end() const { return slots_.data() + size_; }

inline void StashChildren::resize(std::size_t n) {
  for (std::size_t i = n; i < size_; ++i) slots_[i].clear();
  if (n > slots_.size()) slots_.resize(n);
  size_ = n;
}

inline void StashChildren::clear() { resize(0); }

// What a layer runs in: the op context (device, allocator, stream, GEMM mode, precision; kernels/ops) plus
// what only layers need.
struct Context : ops::Context {
  comm::Communicator* tp_comm = nullptr;  // tensor-parallel group (null when tp = 1)
  // Megatron sequence parallelism (parallel.sequence_parallel, needs tp_comm): the activations between the
  // tensor-parallel regions (embedding output, norms, residual stream, final norm) are sequence shards
  // [B, T / tp, ...] (tp rank r holds tokens [r·T/tp, (r+1)·T/tp) of every sample) instead of replicated
  // [B, T, ...]. Only the tensor-parallel parts read it (layers/parallel/: column-parallel linears all-gather
  // their input along the sequence, row-parallel linears and the vocab-parallel embedding reduce-scatter
  // their output); every replicated parameter's gradient is then a partial sum over the tp group that the
  // trainer sums once per step (layers/parallel/tp_util.hpp, sum_sequence_parallel_grads).
  bool sequence_parallel = false;
  // dy of each micro-batch's mean loss (the executor's loss scale, 1 / micro-batches of the global batch): a
  // layer that adds a loss of its own (the moe router's auxiliary losses) scales that loss's gradient by it, so
  // its share of the summed gradient is the same on every layout.
  float loss_scale = 1.0f;
  // Where the mixture-of-experts layers record what they routed this step (layers/moe/router_log.hpp); null:
  // nothing is recorded.
  RouterLog* router_log = nullptr;
  // Context parallelism (parallel.context_parallel_size > 1; layers/context_parallel/): every activation holds
  // this rank's tokens of each sample, `cp` says which (their global positions) and how attention exchanges
  // keys and values over cp_comm. cp_comm is null when cp = 1.
  comm::Communicator* cp_comm = nullptr;
  CpLayout cp;
  // Expert parallelism (parallel.expert_model_parallel_size > 1): the ep group over which the mixture-of-experts
  // layers exchange tokens (layers/moe/expert_dispatch.hpp). Null when ep = 1.
  comm::Communicator* ep_comm = nullptr;
  // The optimizer step being computed (0-based; the trainer sets it before each step). Read only by
  // model.forced_routing's workloads (layers/moe/forced_routing.hpp), which may change with the step.
  std::int64_t step = 0;
  // How a layer waits for a non-blocking exchange it posted (layers/comm_wait.hpp): null = a plain wait. The
  // executor's overlapped F&B pairs (pipeline/overlap_pair.hpp) put theirs here, so that while one micro-batch's
  // all-to-all is in flight the paired micro-batch's work runs. Never changes a value, only the order of
  // independent work.
  CommWaiter* comm_waiter = nullptr;
  // Host memory for what a layer writes on the host and uploads with ops::transfer (the MoE count exchange's
  // staging row): the run's page-locked allocator on a GPU, so the copy is truly asynchronous (CUDA synchronises
  // the stream before a copy from pageable memory, an uncounted host wait). Its blocks are reused by size, so a
  // steady step allocates no new page-locked memory. Null (the CPU, a context outside a run): cpu_allocator().
  // Keep such a tensor alive until the stream has passed its copy (a later host wait of the same stream).
  Allocator* upload_staging = nullptr;
  Allocator& staging_allocator() const { return upload_staging != nullptr ? *upload_staging : cpu_allocator(); }
};

class Layer {
 public:
  virtual ~Layer() = default;

  virtual std::string_view kind() const = 0;
  virtual Tensor forward(const Tensor& x, Stash& stash, Context& ctx) = 0;
  virtual Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) = 0;
  virtual void backward_weight(Stash& stash, Context& ctx) { (void)ctx; stash.clear(); }
  Tensor backward(const Tensor& dy, Stash& stash, Context& ctx) {
    Tensor dx = backward_input(dy, stash, ctx);
    backward_weight(stash, ctx);
    return dx;
  }
  // Parameters owned or shared by this layer (a tied head returns the embedding's table too).
  virtual std::vector<std::shared_ptr<Param>> params() const { return {}; }
};

using LayerPtr = std::unique_ptr<Layer>;

// Evaluation counts of one micro-batch: the loss summed over its non-ignored rows, how many of them the
// model's arg-max predicts correctly, and how many there are.
struct EvalCounts {
  double loss_sum = 0;
  std::int64_t correct = 0;
  std::int64_t rows = 0;
};

// A loss block (the last block of a model). Its targets (i32, one per logits row, -1 = ignored) are an
// argument, as in PyTorch pipelining's loss call, never a value left in the context: forward() returns the
// micro-batch's mean loss; evaluate() scores the logits without keeping anything for a backward. Under tensor
// parallelism both combine the vocabulary shards over ctx.tp_comm, and every rank of the tp group gets the
// same result.
class LossLayer : public Layer {
 public:
  virtual Tensor forward(const Tensor& logits, const Tensor& targets, Stash& stash, Context& ctx) = 0;
  virtual EvalCounts evaluate(const Tensor& logits, const Tensor& targets, Context& ctx) = 0;
  // The target-less Layer entry point: a loss refuses it (forward_block below passes the targets).
  Tensor forward(const Tensor& logits, Stash& stash, Context& ctx) final {
    (void)logits, (void)stash, (void)ctx;
    throw Error(std::string(kind()) + ": a loss layer needs its targets: call forward(logits, targets, stash, ctx)");
  }
};

// One block's forward: a loss block scores x against `targets`, any other block ignores them.
inline Tensor forward_block(Layer& block, const Tensor& x, const Tensor& targets, Stash& stash, Context& ctx) {
  if (auto* loss = dynamic_cast<LossLayer*>(&block)) return loss->forward(x, targets, stash, ctx);
  return block.forward(x, stash, ctx);
}

}  // namespace cleave::layers

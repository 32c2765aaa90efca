// OrderedGradAccumulator: deterministic mode's gradient accumulation over the micro-batches of a step.
//
// Layers accumulate (+=) into Param::grad. Accumulating micro-batch after micro-batch in place adds the
// step's terms in an order that depends on how many micro-batches a rank holds, so one rank and four
// data-parallel ranks would round differently. Instead each micro-batch's weight gradients are computed into
// zeroed buffers and combined in the canonical tree order (engine/core/sum_tree.hpp, streaming form), with
// the leftmost partial sum kept in the parameter's own gradient tensor. With n micro-batches per step and
// every data-parallel rank holding the same power-of-two share of them, the result equals, bit for bit, what
// one rank holding all of them computes.
//
// Invariants:
//  - Between steps (before the first begin_microbatch and after the last param_done of the last micro-batch)
//    every Param::grad is its own tensor again ("home"), holding the canonical sum.
//  - Micro-batches arrive in order 0, 1, ..., n-1 (every schedule runs a stage's weight gradients in
//    micro-batch order; checked). Micro-batch 0 accumulates straight into home, which the caller zeroed.
//  - Expert parallelism (Param::ep_size = ep > 1): the parameter's gradient comes in ep lanes, one per ep source
//    rank, and each lane is a sum of its own. Every micro-batch (0 included) gets a zeroed [ep · rows, ...] buffer
//    whose lane s (rows [s · rows, (s + 1) · rows)) the layer writes; each lane is summed over the micro-batches
//    canonically, then the lanes canonically into home. That is the order of ep 1's canonical sum over the dp × cp
//    ranks restricted to one aligned block of ep ranks (the expert-dp reduction sums the blocks), so for ep a power
//    of two the total is ep 1's bit for bit.
//  - At most floor(log2 n) extra gradient copies are alive (ep lanes: that per lane) (category kGradients, from the allocator's cache:
//    after the first step no system allocation).
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "kernels/ops/context.hpp"
#include "layers/layer.hpp"

namespace cleave::pipeline {

class OrderedGradAccumulator {
 public:
  // `params`: the stage's de-duplicated parameters. `microbatches`: weight-gradient passes per step (>= 1).
  // `ctx`: where the gradients live; partial sums come from its allocator and are added by its ops.
  OrderedGradAccumulator(std::vector<std::shared_ptr<layers::Param>> params, int microbatches,
                         const ops::Context& ctx = {});

  int microbatches() const { return microbatches_; }

  // Before micro-batch `microbatch`'s weight gradients: points every Param::grad at a zeroed buffer
  // (micro-batch 0: at home).
  void begin_microbatch(int microbatch);
  // After `param` has received all of this micro-batch's contributions: folds them into the partial sums.
  // On the last micro-batch this leaves the canonical total in home and restores Param::grad = home.
  void param_done(layers::Param& param);

 private:
  struct Partial {
    Tensor sum;
    int log2_size = 0;  // the partial sum covers 2^log2_size micro-batches
  };
  struct Entry {
    Tensor home;
    std::vector<Partial> stack;  // sizes strictly decreasing; stack[0].sum is home once started
    bool done_this_microbatch = false;
    int lanes = 1;                            // Param::ep_size
    std::vector<std::vector<Partial>> lane_stacks;  // lanes > 1: one stack per lane (views into lane buffers)
  };
  void lane_done(layers::Param& param, Entry& e);

  std::unordered_map<const layers::Param*, Entry> entries_;
  std::vector<std::shared_ptr<layers::Param>> params_;
  int microbatches_;
  int current_ = -1;
  ops::Context ctx_;
};

}  // namespace cleave::pipeline

// The Layer interface (DESIGN §2): explicit forward, split backward, per-micro-batch stashes.
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

namespace cleave::comm {
class Communicator;
}

namespace cleave::layers {

// How a parameter is split across tensor-parallel ranks. dim = -1: replicated.
struct ShardSpec {
  int dim = -1;               // dimension of the logical tensor that is split
  int parts = 1;              // tp size
  int index = 0;              // tp rank
  Shape logical;              // shape of the unsharded tensor (== value's shape when replicated)
};

struct Param {
  std::string name;  // logical name, identical in every layout: "blocks.3.attn.qkv.weight"
  Tensor value;      // kParameters
  Tensor grad;       // kGradients, same shape; accumulated by backward_weight
  ShardSpec shard;
  bool weight_decay = true;  // false for biases, norms and position tables
};

// What one micro-batch's forward leaves behind for its backward.
struct Stash {
  std::vector<Tensor> tensors;
  std::vector<Stash> children;  // stashes of sub-layers, in a fixed order chosen by the composite layer
  void clear() {
    tensors.clear();
    children.clear();
  }
  bool empty() const { return tensors.empty() && children.empty(); }
};

struct Context {
  const Stream* stream = &cpu_stream();
  Allocator* allocator = &cpu_allocator();
  Tensor targets;                       // integer class / next-token targets for loss layers (i32)
  comm::Communicator* tp_comm = nullptr;  // tensor-parallel group (null when tp = 1)
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

}  // namespace cleave::layers

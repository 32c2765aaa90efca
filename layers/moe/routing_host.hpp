// The mixture-of-experts layer's routing data between the host, where routing runs (router.hpp), and ctx.device,
// where the experts run (moe_mlp.hpp): the router's logits and bias read as host floats, the routing's index and
// weight tensors uploaded without a host wait (their host staging handed back to be kept until the backward's wait),
// the logits' gradient uploaded, the counts kept as a host tensor. Nothing here keeps state between calls: a buffer
// that is reused is the caller's argument.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/core/tensor.hpp"
#include "layers/layer.hpp"
#include "layers/moe/router.hpp"

namespace cleave::layers {

// A tensor on ctx.device holding `values` (f32 host data).
Tensor upload_floats(const Context& ctx, std::span<const float> values, const Shape& shape);

// The f32 values of the host tensor `t`: its own bytes when it is f32, else (a bf16 bias) converted into `buffer`,
// whose capacity is kept from call to call. The same values Tensor::to_floats gives.
std::span<const float> host_floats(const Tensor& t, std::vector<float>& buffer);

// The routing's index and weight tensors on ctx.device (upload_async), with the four host staging tensors they were
// copied from (empty slots where none is kept). A forward no backward follows (recomputation's first,
// evaluation's) keeps no stash to hold the staging in: one wait here for the four copies instead (counted on the
// CPU too, which counts what a GPU waits).
struct RoutingTensors {
  Tensor row_token, token_row, weight, row_weight;
  std::array<Tensor, 4> staging;
};
RoutingTensors upload_routing(const Context& ctx, const Routing& routing, bool backward_follows);

// The routing counts [E] kept for backward_weight's groups: a host f32 tensor on every device (as the dispatch plan
// is a host tensor), so reading them back costs no transfer and no host wait on a GPU. f32 holds every count below
// 2^24 exactly (a micro-batch's routed rows), and is the E·4 bytes the cost model counts (partition/families/
// moe_block.cpp).
Tensor counts_to_tensor(const std::vector<std::int64_t>& counts);

}  // namespace cleave::layers

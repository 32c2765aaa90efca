// Expert parallelism's dispatch and combine (see expert_dispatch.hpp).
#include "layers/moe/expert_dispatch.hpp"

#include <algorithm>
#include <cstring>

#include "engine/comm/communicator.hpp"
#include "engine/core/error.hpp"
#include "kernels/ops/ops.hpp"
#include "layers/comm_wait.hpp"
#include "layers/layer_util.hpp"

namespace cleave::layers {

std::int64_t DispatchPlan::received() const {
  std::int64_t n = 0;
  for (std::int64_t r : recv_rows) n += r;
  return n;
}

std::span<const std::int64_t> DispatchPlan::counts_from(int p) const {
  return std::span<const std::int64_t>(recv_counts).subspan(static_cast<std::size_t>(p * local_experts),
                                                            static_cast<std::size_t>(local_experts));
}

std::int64_t DispatchPlan::first_row_from(int p) const {
  std::int64_t first = 0;
  for (int q = 0; q < p; ++q) first += recv_rows[static_cast<std::size_t>(q)];
  return first;
}

DispatchPlan plan_dispatch(std::span<const std::int64_t> counts, Context& ctx) {
  DispatchPlan plan;
  plan_dispatch_into(counts, ctx, plan);
  return plan;
}

void plan_dispatch_into(std::span<const std::int64_t> counts, Context& ctx, DispatchPlan& plan) {
  CLEAVE_ASSERT(ctx.ep_comm != nullptr, "plan_dispatch without an ep communicator");
  comm::Communicator& ep = *ctx.ep_comm;
  plan.ep_size = ep.size();
  plan.ep_rank = ep.rank();
  const auto e = static_cast<std::int64_t>(counts.size());
  CLEAVE_ASSERT(e % plan.ep_size == 0, "plan_dispatch: {} experts over ep {}", e, plan.ep_size);
  plan.local_experts = e / plan.ep_size;
  plan.send_rows.assign(static_cast<std::size_t>(plan.ep_size), 0);
  for (std::int64_t x = 0; x < e; ++x) plan.send_rows[static_cast<std::size_t>(x / plan.local_experts)] += counts[static_cast<std::size_t>(x)];
  // The counts travel on the communicator's device (NCCL moves device memory only). On a GPU they go up from
  // page-locked staging without a host wait: `send_host` lives until the read-back below has waited for the stream
  // (8 · E bytes of the memory plan's host line, partition/families/moe_staging.hpp). On the CPU they are sent
  // from where they are written: ctx.staging_allocator() is the CPU's own allocator there, unless the context has
  // a staging allocator of its own (a test's counting one, so the host line can be checked on the CPU).
  const bool host = ctx.device.is_cpu();
  Tensor send_host = Tensor::empty({plan.ep_size, plan.local_experts}, DType::kI64, MemoryCategory::kCommunication,
                                   ctx.staging_allocator());
  std::memcpy(send_host.raw_data(), counts.data(), counts.size() * sizeof(std::int64_t));
  Tensor send = send_host;
  if (!host) {
    send = Tensor::empty(send_host.shape(), DType::kI64, MemoryCategory::kCommunication, *ctx.allocator);
    ops::transfer(ctx, send_host, send);
  }
  // Every row of recv is written by the exchange (one row from each peer, this rank's own included): on a GPU it
  // needs no upload (which would cost a copy and a host wait per MoE layer forward).
  Tensor recv = Tensor::empty(send.shape(), DType::kI64, MemoryCategory::kCommunication,
                              host ? cpu_allocator() : *ctx.allocator);
  const comm::WorkPtr counts_work = comm::exchange_counts(ep, send, recv, *ctx.stream);
  wait_comm(ctx, *counts_work);  // an overlapped pair's phase boundary (comm_wait.hpp)
  const Tensor got = host ? recv : ops::to_host(ctx, recv);
  const auto* r = got.data<std::int64_t>();
  plan.recv_counts.assign(r, r + e);
  plan.recv_rows.assign(static_cast<std::size_t>(plan.ep_size), 0);
  for (std::int64_t i = 0; i < e; ++i) {
    CLEAVE_ASSERT(plan.recv_counts[static_cast<std::size_t>(i)] >= 0, "plan_dispatch: a negative count from ep rank {}",
                  i / plan.local_experts);
    plan.recv_rows[static_cast<std::size_t>(i / plan.local_experts)] += plan.recv_counts[static_cast<std::size_t>(i)];
  }
}

Tensor plan_to_tensor(const DispatchPlan& plan) {
  const auto n = static_cast<std::int64_t>(3 + plan.send_rows.size() + plan.recv_counts.size());
  Tensor t = Tensor::empty({n}, DType::kI64, MemoryCategory::kActivations, cpu_allocator());
  auto* v = t.data<std::int64_t>();  // written in place: no list of its own per micro-batch
  v[0] = plan.ep_size;
  v[1] = plan.ep_rank;
  v[2] = plan.local_experts;
  std::copy(plan.send_rows.begin(), plan.send_rows.end(), v + 3);
  std::copy(plan.recv_counts.begin(), plan.recv_counts.end(), v + 3 + plan.send_rows.size());
  return t;
}

DispatchPlan plan_from_tensor(const Tensor& t) {
  DispatchPlan plan;
  plan_from_tensor_into(t, plan);
  return plan;
}

void plan_from_tensor_into(const Tensor& t, DispatchPlan& plan) {
  const auto* v = t.data<std::int64_t>();
  plan.ep_size = static_cast<int>(v[0]);
  plan.ep_rank = static_cast<int>(v[1]);
  plan.local_experts = v[2];
  const auto ep = static_cast<std::size_t>(plan.ep_size);
  CLEAVE_ASSERT(t.numel() == static_cast<std::int64_t>(3 + ep + ep * static_cast<std::size_t>(plan.local_experts)),
                "plan_from_tensor: {} values", t.numel());
  plan.send_rows.assign(v + 3, v + 3 + ep);
  plan.recv_counts.assign(v + 3 + ep, v + t.numel());
  plan.recv_rows.assign(ep, 0);
  for (std::size_t i = 0; i < plan.recv_counts.size(); ++i) {
    plan.recv_rows[i / static_cast<std::size_t>(plan.local_experts)] += plan.recv_counts[i];
  }
}

namespace {

Tensor exchange(const Tensor& rows, std::span<const std::int64_t> send_rows, std::span<const std::int64_t> recv_rows,
                std::int64_t out_rows, std::int64_t capacity_rows, Context& ctx) {
  CLEAVE_ASSERT(ctx.ep_comm != nullptr, "expert dispatch without an ep communicator");
  const std::int64_t width = rows.shape().last();
  // The first out_rows rows of a block of capacity_rows (when larger): one size a step for a caller that keeps one.
  Tensor out =
      new_activation(ctx, Shape{std::max(capacity_rows, out_rows), width}, rows.dtype()).slice(0, out_rows);
  const comm::WorkPtr work =
      ctx.ep_comm->all_to_all_v(rows.view(Shape{rows.numel() / width, width}), send_rows, out, recv_rows, *ctx.stream);
  wait_comm(ctx, *work);  // an overlapped pair's phase boundary (comm_wait.hpp)
  return out;
}

}  // namespace

Tensor dispatch_rows(const Tensor& rows, const DispatchPlan& plan, Context& ctx, std::int64_t capacity_rows) {
  return exchange(rows, plan.send_rows, plan.recv_rows, plan.received(), capacity_rows, ctx);
}

Tensor combine_rows(const Tensor& rows, const DispatchPlan& plan, Context& ctx) {
  std::int64_t sent = 0;
  for (std::int64_t r : plan.send_rows) sent += r;
  return exchange(rows, plan.recv_rows, plan.send_rows, sent, 0, ctx);
}

}  // namespace cleave::layers

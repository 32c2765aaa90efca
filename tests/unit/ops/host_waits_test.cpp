// The run's host-wait counter (kernels/ops/host_waits.hpp): every "(host value)" op of the seam notes exactly one
// wait of its kind in Context::host_waits, on the CPU backend and on a substituted backend table alike (the
// counting is the seam's, not a backend's), each slot runs once per noted wait, and a context without a counter
// counts nothing. The per-step number a training run makes is held in tests/e2e/train_single_rank_test.cpp (CPU)
// and tests/gpu/train/train_gpu_test.cpp (GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <vector>

#include "kernels/ops/backend.hpp"
#include "kernels/ops/host_waits.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::ops::host_waits_test {
namespace {

Tensor floats(const std::vector<float>& values) {
  Tensor t = Tensor::empty({static_cast<std::int64_t>(values.size())}, DType::kF32, MemoryCategory::kActivations,
                           cpu_allocator());
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

// Calls each host-value op once (to_host and to_device: a transfer and one synchronize each).
void call_every_host_value_op(const Context& ctx) {
  const Tensor x = floats({1.5f, -2.0f, 0.25f});
  synchronize(ctx);
  (void)to_host(ctx, x);
  (void)to_device(ctx, x, MemoryCategory::kActivations);
  EXPECT_DOUBLE_EQ(sum_squares(ctx, x), 6.3125);
  const std::array<Tensor, 2> xs = {x, x};
  EXPECT_DOUBLE_EQ(sum_squares_many(ctx, xs), 12.625);
  const Tensor neg_index = floats({-1.0f, -0.0f});
  Tensor targets = Tensor::empty({2}, DType::kI32, MemoryCategory::kActivations, cpu_allocator());
  targets.data<std::int32_t>()[0] = 1;
  targets.data<std::int32_t>()[1] = 1;
  EXPECT_EQ(count_correct(ctx, neg_index, targets).correct, 1);
  check_device_status(ctx);
}

TEST(HostWaits, EveryHostValueOpNotesOneWaitOfItsKind) {
  HostWaits waits;
  Context ctx;
  ctx.host_waits = &waits;
  call_every_host_value_op(ctx);
  EXPECT_EQ(waits.count(HostWait::kSynchronize), 3);
  EXPECT_EQ(waits.count(HostWait::kSumSquares), 1);
  EXPECT_EQ(waits.count(HostWait::kSumSquaresMany), 1);
  EXPECT_EQ(waits.count(HostWait::kCountCorrect), 1);
  EXPECT_EQ(waits.count(HostWait::kDeviceStatus), 1);
  EXPECT_EQ(waits.total(), 7);
  EXPECT_EQ(waits.str(),
            "7 (synchronize 3, sum_squares 1, sum_squares_many 1, count_correct 1, check_device_status 1)");

  // Ops that do not return a host value leave it alone; since() gives the window.
  const HostWaits before = waits;
  const Tensor x = floats({1.0f, 2.0f});
  scale_inplace(ctx, x, 2.0f);
  transfer(ctx, x, x);
  EXPECT_EQ(waits.since(before).total(), 0);
  synchronize(ctx);
  EXPECT_EQ(waits.since(before).str(), "1 (synchronize 1)");
}

TEST(HostWaits, AContextWithoutACounterCountsNothing) {
  const Context ctx;  // host_waits null
  call_every_host_value_op(ctx);
  EXPECT_EQ(ctx.host_waits, nullptr);
}

// The counting lives in the seam: a substituted table (Context::backend, as the CUDA coverage test uses) is counted
// the same, once per slot call, whichever slot implements the wait. The slots find their call counts through
// ctx.backend (the table is this struct), as the coverage test's recording table does.
struct CountingBackend : Backend {
  mutable int synchronize_calls = 0;
  mutable int device_status_calls = 0;
};

TEST(HostWaits, CountingIsTheSeamsForAnyBackendTable) {
  CountingBackend table;
  static_cast<Backend&>(table) = cpu_backend();
  table.name = "cpu (counting slots)";
  table.synchronize = [](const Context& c) { ++static_cast<const CountingBackend*>(c.backend)->synchronize_calls; };
  table.check_device_status = [](const Context& c) {
    ++static_cast<const CountingBackend*>(c.backend)->device_status_calls;
  };
  HostWaits waits;
  Context ctx;
  ctx.backend = &table;
  ctx.host_waits = &waits;
  for (int i = 0; i < 4; ++i) synchronize(ctx);
  (void)to_host(ctx, floats({3.0f}));
  check_device_status(ctx);
  check_device_status(ctx);
  EXPECT_EQ(table.synchronize_calls, 5);
  EXPECT_EQ(table.device_status_calls, 2);
  EXPECT_EQ(waits.count(HostWait::kSynchronize), table.synchronize_calls);
  EXPECT_EQ(waits.count(HostWait::kDeviceStatus), table.device_status_calls);
  EXPECT_EQ(waits.total(), 7);
}

}  // namespace
}  // namespace cleave::ops::host_waits_test

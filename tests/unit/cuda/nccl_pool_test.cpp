// The NCCL backend's per-op pieces that need no GPU (its done events' pool is engine/cuda/event_pool.hpp, tested in
// event_pool_test.cpp): engine/comm/nccl/op_details.hpp (each op's details format to the
// text the backend's error and timeout reports always carried, a batch's labels fit the reserved capacity, and
// copying them into a reused record, as the watchdog's slots do, does not grow it).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/comm/nccl/op_details.hpp"
#include "engine/core/allocator.hpp"
#include "engine/core/error.hpp"

namespace cleave::testing::nccl_pool_test {
namespace {

using comm::detail::NcclOpDetails;
using comm::detail::format_details;

Tensor host(std::int64_t n, DType dtype) {
  return Tensor::empty({n}, dtype, MemoryCategory::kActivations, cpu_allocator());
}

TEST(NcclOpDetailsText, EachOpFormatsAsTheReportsAlwaysDid) {
  NcclOpDetails d;
  EXPECT_EQ(format_details(d), "");  // barrier
  d.set(NcclOpDetails::Form::kReduce, host(4096, DType::kF32), comm::ReduceOp::kSum);
  EXPECT_EQ(format_details(d), "4096 f32, sum");
  d.set(NcclOpDetails::Form::kReducePerRank, host(1024, DType::kBF16), comm::ReduceOp::kMax);
  EXPECT_EQ(format_details(d), "1024 bf16 per rank, max");
  d.set(NcclOpDetails::Form::kPerRank, host(7, DType::kU16));
  EXPECT_EQ(format_details(d), "7 u16 per rank");
  d.set(NcclOpDetails::Form::kRoot, host(3, DType::kI64), comm::ReduceOp::kSum, 2);
  EXPECT_EQ(format_details(d), "3 i64, root rank 2");
  d.clear();
  EXPECT_EQ(format_details(d), "");
}

TEST(NcclOpDetailsText, ABatchNamesEveryPeerInPostingOrder) {
  NcclOpDetails d;
  d.add_peer(false, 0, 4, host(8, DType::kF32));
  d.add_peer(true, 1, 6, host(16, DType::kBF16));
  EXPECT_EQ(format_details(d), "2 ops: recv from rank 0 (world 4) (8 f32), send to rank 1 (world 6) (16 bf16)");
  d.clear();
  d.add_peer(true, 3, 3, host(1, DType::kI32));
  EXPECT_EQ(format_details(d), "1 ops: send to rank 3 (world 3) (1 i32)");
}

TEST(NcclOpDetailsText, ABatchFitsTheReservedCapacityAndCopiesWithoutGrowing) {
  NcclOpDetails work;  // a pooled Work's details
  NcclOpDetails slot;  // a watchdog slot, reused by later ops
  const auto* const slot_storage = slot.peers.data();
  for (int step = 0; step < 3; ++step) {
    work.clear();
    for (int i = 0; i < 8; ++i) work.add_peer(i % 2 == 0, i, i, host(4, DType::kF32));  // ring attention's 8 ops
    EXPECT_EQ(work.peers.capacity(), NcclOpDetails::kReservedPeers);
    slot = work;
    EXPECT_EQ(slot.peers.data(), slot_storage) << "copying into a slot reallocated its labels";
    EXPECT_EQ(format_details(slot), format_details(work));
  }
}

}  // namespace
}  // namespace cleave::testing::nccl_pool_test

// The NCCL backend's per-op pieces that need no GPU: engine/comm/nccl/event_pool.hpp with recording stand-ins for
// cudaEventCreateWithFlags / cudaEventDestroy (an event is created only when every one made is in flight, is handed
// out again once given back, and the pool destroys exactly the events it holds; a failed creation throws naming
// the call and leaves the pool as it was), and engine/comm/nccl/op_details.hpp (each op's details format to the
// text the backend's error and timeout reports always carried, a batch's labels fit the reserved capacity, and
// copying them into a reused record, as the watchdog's slots do, does not grow it).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/comm/nccl/event_pool.hpp"
#include "engine/comm/nccl/op_details.hpp"
#include "engine/core/allocator.hpp"
#include "engine/core/error.hpp"

namespace cleave::testing {
namespace {

using comm::detail::EventCalls;
using comm::detail::EventPool;
using comm::detail::NcclOpDetails;
using comm::detail::format_details;

// What the stand-ins saw (plain function pointers cannot capture: one record, reset by each test). Each creation
// hands out a distinct fake handle (never used as an event).
struct EventRecord {
  std::vector<cudaEvent_t> created;
  std::vector<cudaEvent_t> destroyed;
  std::vector<unsigned int> flags;
  cudaError_t create_status = cudaSuccess;
  std::uintptr_t next = 0x1000;
};
EventRecord record;

cudaError_t fake_create(cudaEvent_t* event, unsigned int flags) {
  if (record.create_status != cudaSuccess) return record.create_status;
  *event = reinterpret_cast<cudaEvent_t>(record.next);
  record.next += 0x10;
  record.created.push_back(*event);
  record.flags.push_back(flags);
  return cudaSuccess;
}

cudaError_t fake_destroy(cudaEvent_t event) {
  record.destroyed.push_back(event);
  return cudaSuccess;
}

class NcclEventPool : public ::testing::Test {
 protected:
  void SetUp() override { record = EventRecord{}; }
  EventCalls calls{&fake_create, &fake_destroy};
};

TEST_F(NcclEventPool, AnEventGivenBackIsTheNextOneTaken) {
  EventPool pool(calls);
  const cudaEvent_t first = pool.take();
  ASSERT_EQ(record.created.size(), 1u);
  EXPECT_EQ(record.flags[0], static_cast<unsigned int>(cudaEventDisableTiming));
  pool.give(first);
  for (int op = 0; op < 20; ++op) {  // one op in flight at a time: one event, recorded again each time
    const cudaEvent_t again = pool.take();
    EXPECT_EQ(again, first);
    pool.give(again);
  }
  EXPECT_EQ(record.created.size(), 1u);
  EXPECT_EQ(pool.made(), 1u);
  EXPECT_TRUE(record.destroyed.empty());
}

TEST_F(NcclEventPool, CreatesOnlyWhenAllAreInFlight) {
  EventPool pool(calls);
  std::vector<cudaEvent_t> in_flight;
  for (int i = 0; i < 8; ++i) in_flight.push_back(pool.take());  // a rotation's 8 ops
  EXPECT_EQ(record.created.size(), 8u);
  for (cudaEvent_t e : in_flight) pool.give(e);  // the watchdog saw them fire
  in_flight.clear();
  for (int step = 0; step < 3; ++step) {
    for (int i = 0; i < 8; ++i) in_flight.push_back(pool.take());
    for (cudaEvent_t e : in_flight) pool.give(e);
    in_flight.clear();
  }
  EXPECT_EQ(record.created.size(), 8u) << "a steady step created an event";
  for (int i = 0; i < 9; ++i) in_flight.push_back(pool.take());
  EXPECT_EQ(record.created.size(), 9u);
  for (cudaEvent_t e : in_flight) pool.give(e);
  EXPECT_EQ(pool.idle(), 9u);
}

TEST_F(NcclEventPool, DestroysExactlyTheEventsItHolds) {
  std::vector<cudaEvent_t> created;
  cudaEvent_t outstanding = nullptr;
  {
    EventPool pool(calls);
    const cudaEvent_t a = pool.take();
    const cudaEvent_t b = pool.take();
    outstanding = pool.take();  // still with the watchdog when the communicator goes: its holder destroys it
    pool.give(a);
    pool.give(b);
    pool.give(nullptr);  // a Work whose event went to the watchdog gives back nothing
    created = record.created;
  }
  ASSERT_EQ(created.size(), 3u);
  ASSERT_EQ(record.destroyed.size(), 2u);
  for (cudaEvent_t e : record.destroyed) EXPECT_NE(e, outstanding);
  EXPECT_NE(record.destroyed[0], record.destroyed[1]);
}

TEST_F(NcclEventPool, AFailedCreationThrowsAndLeavesThePoolAsItWas) {
  EventPool pool(calls);
  const cudaEvent_t a = pool.take();
  record.create_status = cudaErrorMemoryAllocation;
  try {
    (void)pool.take();
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("create"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pool.made(), 1u);
  record.create_status = cudaSuccess;
  pool.give(a);
  EXPECT_EQ(pool.take(), a);
}

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
}  // namespace cleave::testing

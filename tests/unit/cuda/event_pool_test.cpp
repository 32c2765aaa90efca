// engine/cuda/event_pool.hpp without a GPU, with recording stand-ins for cudaEventCreateWithFlags /
// cudaEventDestroy: EventPool (an event is created only when every one made is in flight, is handed out again once
// given back, and the pool destroys exactly the events it holds; a failed creation throws naming the call and
// leaves the pool as it was), PooledEvent (the staged backend's holder: its event goes back when it is reset,
// destroyed or moved over, once, and a moved-from holder gives back nothing) and EventPools (one pool per device,
// made on first use; the staged backend's steady steps create no event).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/error.hpp"
#include "engine/cuda/event_pool.hpp"

namespace cleave::testing::event_pool_test {
namespace {

using cuda::EventCalls;
using cuda::EventPool;
using cuda::EventPools;
using cuda::PooledEvent;

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

class EventPoolTest : public ::testing::Test {
 protected:
  void SetUp() override { record = EventRecord{}; }
  EventCalls calls{&fake_create, &fake_destroy};
};

TEST_F(EventPoolTest, AnEventGivenBackIsTheNextOneTaken) {
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

TEST_F(EventPoolTest, CreatesOnlyWhenAllAreInFlight) {
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

TEST_F(EventPoolTest, DestroysExactlyTheEventsItHolds) {
  std::vector<cudaEvent_t> created;
  cudaEvent_t outstanding = nullptr;
  {
    EventPool pool(calls);
    const cudaEvent_t a = pool.take();
    const cudaEvent_t b = pool.take();
    outstanding = pool.take();  // still in flight when the communicator goes (with the watchdog): its holder destroys it
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

TEST_F(EventPoolTest, AFailedCreationThrowsAndLeavesThePoolAsItWas) {
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

TEST_F(EventPoolTest, APooledEventGoesBackOnceWhenResetDestroyedOrMovedOver) {
  EventPool pool(calls);
  {
    PooledEvent a(pool);
    ASSERT_TRUE(a.has_value());
    const cudaEvent_t first = a.native();
    EXPECT_EQ(pool.idle(), 0u);
    PooledEvent moved(std::move(a));  // the holder moves (a StagedOp into its StagedWork): nothing given back
    EXPECT_FALSE(a.has_value());
    EXPECT_EQ(moved.native(), first);
    EXPECT_EQ(pool.idle(), 0u);
    moved.reset();
    EXPECT_EQ(pool.idle(), 1u);
    moved.reset();  // twice: once only
    EXPECT_EQ(pool.idle(), 1u);
    PooledEvent b(pool);
    EXPECT_EQ(b.native(), first) << "the event given back is the next one taken";
    PooledEvent c(pool);  // b in flight: a second event
    b = std::move(c);  // b's first event back, c's now b's
    EXPECT_EQ(pool.idle(), 1u);
    EXPECT_FALSE(c.has_value());
  }  // b destroyed: its event back
  EXPECT_EQ(pool.idle(), 2u);
  EXPECT_EQ(pool.made(), 2u);
  EXPECT_TRUE(record.destroyed.empty());
  PooledEvent empty;
  EXPECT_FALSE(empty.has_value());
  empty.reset();
  EXPECT_EQ(pool.idle(), 2u);
}

// The staged backend's steps: each op holds one or two events (a copy back's, a receive's ready) until its Work
// finishes. A warm-up step on device 0 and one on device 1 create what they hold at most; later steps none.
TEST_F(EventPoolTest, PoolsPerDeviceCreateNothingAfterTheWarmUp) {
  EventPools pools(calls);
  EXPECT_EQ(&pools.on(0), &pools.on(0));
  EXPECT_NE(&pools.on(0), &pools.on(1));
  const auto step = [&](int device) {
    std::vector<PooledEvent> in_flight;
    for (int op = 0; op < 5; ++op) in_flight.emplace_back(pools.on(device));  // 5 Works in flight
    in_flight.emplace_back(pools.on(device));                                  // one with a ready event too
  };  // the Works finish: every event back
  step(0);
  step(1);
  EXPECT_EQ(pools.made(), 12u);
  EXPECT_EQ(record.created.size(), 12u);
  for (int s = 0; s < 4; ++s) {
    step(0);
    step(1);
  }
  EXPECT_EQ(pools.made(), 12u) << "a steady step created an event";
  EXPECT_EQ(pools.on(0).idle(), 6u);
  EXPECT_EQ(pools.on(1).idle(), 6u);
}

}  // namespace
}  // namespace cleave::testing::event_pool_test

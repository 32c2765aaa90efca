// engine/comm/work_pool.hpp, the communicators' pool of finished Works (MPI and NCCL backends): a Work given back
// is the one taken next (its capacity kept), a new one is made only when every Work made so far is in flight, and
// giving back never grows the idle list (room for every Work made is reserved when it is made).
#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "engine/comm/work_pool.hpp"

namespace cleave::testing::work_pool_test {
namespace {

using comm::detail::WorkPool;

struct FakeWork {
  int id = 0;
  std::vector<int> scratch;  // stands for a Work's vectors, whose capacity must survive the pool
};

struct Maker {
  int* made;
  std::unique_ptr<FakeWork> operator()() const {
    auto work = std::make_unique<FakeWork>();
    work->id = ++*made;
    return work;
  }
};

TEST(WorkPool, ReusesAGivenBackWorkWithItsCapacity) {
  WorkPool<FakeWork> pool;
  int made = 0;
  std::unique_ptr<FakeWork> first = pool.take(Maker{&made});
  EXPECT_EQ(first->id, 1);
  first->scratch.reserve(64);
  FakeWork* const address = first.get();
  pool.give(std::move(first));
  EXPECT_EQ(pool.idle(), 1u);
  for (int op = 0; op < 10; ++op) {  // one op in flight at a time: always the same Work
    std::unique_ptr<FakeWork> again = pool.take(Maker{&made});
    EXPECT_EQ(again.get(), address);
    EXPECT_GE(again->scratch.capacity(), 64u);
    pool.give(std::move(again));
  }
  EXPECT_EQ(made, 1);
  EXPECT_EQ(pool.made(), 1u);
}

TEST(WorkPool, MakesANewWorkOnlyWhenAllAreInFlight) {
  WorkPool<FakeWork> pool;
  int made = 0;
  std::vector<std::unique_ptr<FakeWork>> in_flight;
  for (int i = 0; i < 8; ++i) in_flight.push_back(pool.take(Maker{&made}));  // ring attention's 8 ops
  EXPECT_EQ(made, 8);
  EXPECT_EQ(pool.idle(), 0u);
  for (auto& w : in_flight) pool.give(std::move(w));
  in_flight.clear();
  EXPECT_EQ(pool.idle(), 8u);
  // A steady step: the same 8 in flight, then 3 of them again: nothing new.
  for (int step = 0; step < 3; ++step) {
    for (int i = 0; i < 8; ++i) in_flight.push_back(pool.take(Maker{&made}));
    for (auto& w : in_flight) pool.give(std::move(w));
    in_flight.clear();
  }
  EXPECT_EQ(made, 8);
  // A ninth in flight at once is the only growth.
  for (int i = 0; i < 9; ++i) in_flight.push_back(pool.take(Maker{&made}));
  EXPECT_EQ(made, 9);
  EXPECT_EQ(pool.made(), 9u);
  for (auto& w : in_flight) pool.give(std::move(w));
  EXPECT_EQ(pool.idle(), 9u);
}

TEST(WorkPool, GivingBackNeverGrowsTheIdleList) {
  WorkPool<FakeWork> pool;
  int made = 0;
  std::vector<std::unique_ptr<FakeWork>> in_flight;
  for (int i = 0; i < 5; ++i) {
    in_flight.push_back(pool.take(Maker{&made}));
    EXPECT_GE(pool.capacity(), pool.made()) << "room for every Work made, reserved when it was made";
  }
  const std::size_t capacity = pool.capacity();
  for (auto& w : in_flight) {
    pool.give(std::move(w));
    EXPECT_EQ(pool.capacity(), capacity) << "give() reallocated the idle list";
  }
  pool.clear();
  EXPECT_EQ(pool.idle(), 0u);
}

}  // namespace
}  // namespace cleave::testing::work_pool_test

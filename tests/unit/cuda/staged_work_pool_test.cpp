// The staged backend's pool of Works (engine/comm/cuda/staged_work.hpp, StagedWork::take over
// engine/comm/work_pool.hpp) without a GPU: the Works here carry CPU tensors only in the vectors the pool reuses (kept
// buffers, the batch as posted) and no copy back, so no CUDA call is made. Asserts the pool's invariants:
//  - a finished Work goes back to the pool and is the next one taken, emptied, with its vectors' capacity;
//  - a Work is never in the pool while in flight: one dropped unfinished is first completed through its inner Work
//    (wait()), its inner Work and tensors released, and only then pooled; a new Work is made only when every one
//    made so far is in flight; a failed one goes back without waiting and comes out clean;
//  - steady steps of 8 ops in flight at once, dropped in varying orders, make no heap allocation after a warm-up
//    step (counted by this file's replaced global operator new, which only counts, on this thread, while armed:
//    it is the whole binary's operator new, so the arming is the one piece of process state a test keeps).
// The same staged ops on a GPU are counted end to end by Staged.StepsAfterTheWarmUpAllocateNothingOnTheHost
// (tests/gpu/comm/staged_comm_test.cpp).
#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/comm/cuda/staged_work.hpp"
#include "engine/core/allocator.hpp"

namespace {
thread_local bool t_counting = false;
thread_local std::int64_t t_allocations = 0;
}  // namespace

// Out of line, so the compiler sees no malloc behind a new to pair with the free behind a delete.
__attribute__((noinline)) void* operator new(std::size_t bytes) {
  if (t_counting) ++t_allocations;
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
  throw std::bad_alloc();
}
__attribute__((noinline)) void operator delete(void* p) noexcept { std::free(p); }
__attribute__((noinline)) void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace cleave::testing::staged_work_pool_test {
namespace {

using comm::P2POp;
using comm::WorkPtr;
using comm::detail::StagedOp;
using comm::detail::StagedWork;
using comm::detail::StagingResources;

// Heap allocations (operator new) made on this thread while `body` runs.
template <class Body>
std::int64_t allocations_in(Body&& body) {
  t_allocations = 0;
  t_counting = true;
  body();
  t_counting = false;
  return t_allocations;
}

// An inner op the test completes by hand. Never deleted by its handle: recycle() just marks it released, so the
// inner Works of the counted steps are the test's own, made before counting (as the MPI backend's are pooled).
class HeldWork final : public comm::Work {
 public:
  bool test() override {
    if (fail) throw std::runtime_error("the inner op failed");
    return complete;
  }
  void wait() override {
    ++waits;
    complete = true;
  }
  void reset() {
    complete = false;
    fail = false;
    waits = 0;
    released = false;
  }

  bool complete = false;
  bool fail = false;
  int waits = 0;
  bool released = false;

 protected:
  void recycle() noexcept override { released = true; }
};

WorkPtr handle(HeldWork& inner) { return WorkPtr(&inner); }

// The inner communicator a StagedWork holds (for an abort after a failure in a destructor): no op reaches it.
class NoOpsCommunicator final : public comm::Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string_view backend() const override { return "none"; }
  const std::string& name() const override { return name_; }
  const std::vector<int>& world_ranks() const override { return ranks_; }
  const comm::CommOptions& options() const override { return options_; }
  [[noreturn]] void abort(const std::string& reason) override {
    ADD_FAILURE() << "abort: " << reason;
    std::abort();
  }

 protected:
  std::unique_ptr<Communicator> split_impl(int, int, std::string) override { return refuse(); }
  WorkPtr all_reduce_impl(const Tensor&, comm::ReduceOp, const Stream&) override { return refuse(); }
  WorkPtr reduce_scatter_impl(const Tensor&, const Tensor&, comm::ReduceOp, const Stream&) override {
    return refuse();
  }
  WorkPtr all_gather_impl(const Tensor&, const Tensor&, const Stream&) override { return refuse(); }
  WorkPtr broadcast_impl(const Tensor&, int, const Stream&) override { return refuse(); }
  WorkPtr barrier_impl(const Stream&) override { return refuse(); }
  WorkPtr batch_p2p_impl(std::span<const P2POp>, const Stream&) override { return refuse(); }

 private:
  static std::nullptr_t refuse() { throw std::logic_error("NoOpsCommunicator carries no op"); }
  std::string name_ = "none";
  std::vector<int> ranks_{0};
  comm::CommOptions options_;
};

Tensor host(std::int64_t n) { return Tensor::empty({n}, DType::kF32, MemoryCategory::kCommunication, cpu_allocator()); }

class StagedWorkPool : public ::testing::Test {
 protected:
  StagedWork::Ptr take() { return StagedWork::take(resources, inner, "all_reduce", 0, nullptr); }

  std::shared_ptr<StagingResources> resources = std::make_shared<StagingResources>();
  std::shared_ptr<comm::Communicator> inner = std::make_shared<NoOpsCommunicator>();
};

TEST_F(StagedWorkPool, AFinishedWorkIsTheNextOneTakenEmptiedWithItsCapacity) {
  const Tensor t = host(64);
  HeldWork op;
  StagedWork::Ptr work = take();
  const StagedWork* const first = work.get();
  for (std::size_t i = 0; i < StagedOp::kReserved + 4; ++i) work->staged().keep.push_back(t);  // grows past the reserve
  work->staged().host_ops.push_back(P2POp::send(t, 1));
  const std::size_t grown = work->capacity();
  work->start(handle(op));
  EXPECT_TRUE(work->in_flight());
  EXPECT_FALSE(work->test());
  op.complete = true;
  EXPECT_TRUE(work->test());
  EXPECT_TRUE(op.released) << "the inner Work is released when the op completes";
  EXPECT_EQ(t.storage().use_count(), 1) << "the Work released its tensors when it completed";
  work.reset();
  EXPECT_EQ(resources->works.idle(), 1u);

  StagedWork::Ptr again = take();
  EXPECT_EQ(again.get(), first) << "the finished Work is the next one taken";
  EXPECT_EQ(resources->works.made(), 1u);
  EXPECT_EQ(again->capacity(), grown) << "its vectors kept their capacity";
  EXPECT_TRUE(again->staged().keep.empty());
  EXPECT_TRUE(again->staged().host_ops.empty());
  EXPECT_FALSE(again->in_flight()) << "not started: dropping it just returns it";
}

TEST_F(StagedWorkPool, AWorkIsNeverPooledWhileInFlight) {
  const Tensor t = host(8);
  HeldWork op_a;
  HeldWork op_b;
  StagedWork::Ptr a = take();
  a->staged().keep.push_back(t);
  a->start(handle(op_a));
  StagedWork::Ptr b = take();  // a is in flight: a second Work
  EXPECT_NE(b.get(), a.get());
  EXPECT_EQ(resources->works.made(), 2u);
  b->start(handle(op_b));

  const StagedWork* const dropped = a.get();
  a.reset();  // dropped unfinished: completed first, as wait() would
  EXPECT_EQ(op_a.waits, 1) << "the pool took a Work whose inner op was never waited for";
  EXPECT_TRUE(op_a.released);
  EXPECT_EQ(t.storage().use_count(), 1) << "the pooled Work still holds the op's buffers";
  EXPECT_EQ(resources->works.idle(), 1u);

  StagedWork::Ptr c = take();
  EXPECT_EQ(c.get(), dropped) << "the completed Work is reused";
  EXPECT_FALSE(c->in_flight());
  EXPECT_TRUE(b->in_flight()) << "the other op is untouched";
  EXPECT_EQ(resources->works.made(), 2u);
  EXPECT_EQ(op_b.waits, 0);
  b.reset();
  EXPECT_EQ(op_b.waits, 1);
}

TEST_F(StagedWorkPool, AFailedWorkGoesBackWithoutWaitingAndComesOutClean) {
  HeldWork op;
  StagedWork::Ptr work = take();
  const StagedWork* const first = work.get();
  work->staged().keep.push_back(host(4));
  work->start(handle(op));
  op.fail = true;
  EXPECT_THROW(work->test(), std::runtime_error);
  EXPECT_FALSE(work->in_flight());
  work.reset();
  EXPECT_EQ(op.waits, 0) << "a failed op is not waited for again";
  EXPECT_TRUE(op.released);

  HeldWork next;
  StagedWork::Ptr again = take();
  EXPECT_EQ(again.get(), first);
  EXPECT_TRUE(again->staged().keep.empty());
  again->start(handle(next));
  next.complete = true;
  EXPECT_TRUE(again->test()) << "the reused Work reports its own op, not the failure";
}

// A step: 8 ops in flight at once (a receive ring's shape: each keeps 2 buffers and posts 6 host ops), completed,
// then dropped in an order that changes from step to step, so the pool hands Works to different ops each time.
TEST_F(StagedWorkPool, StepsAfterTheWarmUpAllocateNothing) {
  constexpr int kInFlight = 8;
  std::array<Tensor, 3> tensors = {host(16), host(32), host(48)};
  std::array<HeldWork, kInFlight> ops;
  std::array<StagedWork::Ptr, kInFlight> works;
  auto step = [&](int s) {
    for (int i = 0; i < kInFlight; ++i) {
      ops[static_cast<std::size_t>(i)].reset();
      StagedWork::Ptr work = take();
      StagedOp& staged = work->staged();
      staged.keep.push_back(tensors[0]);
      staged.keep.push_back(tensors[static_cast<std::size_t>(i % 3)]);
      for (int k = 0; k < 6; ++k) staged.host_ops.push_back(P2POp::recv(tensors[static_cast<std::size_t>(k % 3)], k));
      work->start(handle(ops[static_cast<std::size_t>(i)]));
      works[static_cast<std::size_t>(i)] = std::move(work);
    }
    for (HeldWork& op : ops) op.complete = true;
    for (int i = 0; i < kInFlight; ++i) {
      StagedWork::Ptr& work = works[static_cast<std::size_t>((i * (2 * s + 1)) % kInFlight)];
      if (i % 2 == 0) work->wait();
      work.reset();
    }
  };
  step(0);
  ASSERT_EQ(resources->works.made(), static_cast<std::size_t>(kInFlight));
  for (int s = 1; s <= 3; ++s) {
    EXPECT_EQ(allocations_in([&] { step(s); }), 0) << "step " << s << " allocated on the heap";
    EXPECT_EQ(resources->works.made(), static_cast<std::size_t>(kInFlight)) << "step " << s << " made a Work";
  }
  for (const Tensor& t : tensors) EXPECT_EQ(t.storage().use_count(), 1) << "a pooled Work holds a tensor";
  // The counter sees what is made while it counts (a counter that sees nothing cannot pass).
  EXPECT_EQ(allocations_in([] {
              void* volatile p = ::operator new(1);  // an explicit call: not elided
              ::operator delete(p);
            }),
            1);
}

}  // namespace
}  // namespace cleave::testing::staged_work_pool_test

// Stash::clear (layers/layer.hpp): an exchange still in flight completes before any buffer it may write into is
// released, its own stash's, a child's or a parent's, and clear() empties everything but backward_follows. The
// Work here is a recording double: it notes, when it completes, whether the buffer it writes into is still alive.
#include <gtest/gtest.h>

#include <memory>

#include "engine/comm/communicator.hpp"
#include "engine/core/allocator.hpp"
#include "engine/core/tensor.hpp"
#include "layers/layer.hpp"

namespace cleave::layers::stash_test {
namespace {

// What a RecordingWork saw: whether it completed, and whether its buffer was alive at that moment.
struct Seen {
  bool completed = false;
  bool buffer_alive = false;
};

// A Work writing into `buffer` until it completes. Like the real backends, dropping it in flight completes it.
class RecordingWork final : public comm::Work {
 public:
  RecordingWork(const Tensor& buffer, Seen* seen) : buffer_(buffer.storage()), seen_(seen) {}
  ~RecordingWork() override { complete(); }
  bool test() override {
    complete();
    return true;
  }
  void wait() override { complete(); }

 private:
  void complete() {
    if (seen_->completed) return;
    seen_->completed = true;
    seen_->buffer_alive = !buffer_.expired();
  }
  std::weak_ptr<Storage> buffer_;
  Seen* seen_;
};

Tensor buffer() { return Tensor::zeros(Shape{4}, DType::kF32, MemoryCategory::kActivations, cpu_allocator()); }

TEST(Stash, ClearCompletesTheExchangeBeforeReleasingItsBuffer) {
  Seen seen;
  Stash stash;
  stash.backward_follows = false;
  {
    const Tensor sums = buffer();
    stash.tensors = {buffer(), sums};
    stash.in_flight = {std::make_shared<RecordingWork>(sums, &seen)};
  }
  stash.clear();
  EXPECT_TRUE(seen.completed);
  EXPECT_TRUE(seen.buffer_alive) << "the stash released the buffer of an exchange still in flight";
  EXPECT_TRUE(stash.empty());
  EXPECT_FALSE(stash.backward_follows);
}

// A Work held elsewhere too (the layer's own copy) is completed by clear(), not only by its last owner.
TEST(Stash, ClearCompletesASharedExchangeBeforeReleasingItsBuffer) {
  Seen seen;
  Stash stash;
  std::shared_ptr<comm::Work> held;
  {
    const Tensor sums = buffer();
    stash.tensors = {sums};
    held = std::make_shared<RecordingWork>(sums, &seen);
    stash.in_flight = {held};
  }
  stash.clear();
  EXPECT_TRUE(seen.completed);
  EXPECT_TRUE(seen.buffer_alive);
}

// Across the tree: a child's exchange into the parent's buffer, the parent's into a child's, a child's into a
// sibling's; every exchange completes before any buffer goes.
TEST(Stash, ClearCompletesEveryExchangeOfTheTreeBeforeAnyBufferGoes) {
  Seen child_into_parent, parent_into_child, into_sibling;
  Stash stash;
  stash.reset(2);
  {
    const Tensor parent_buffer = buffer();
    const Tensor first_child_buffer = buffer();
    const Tensor second_child_buffer = buffer();
    stash.tensors = {parent_buffer};
    stash.children[0].tensors = {first_child_buffer};
    stash.children[1].tensors = {second_child_buffer};
    stash.in_flight = {std::make_shared<RecordingWork>(first_child_buffer, &parent_into_child)};
    stash.children[0].in_flight = {std::make_shared<RecordingWork>(parent_buffer, &child_into_parent)};
    stash.children[1].in_flight = {std::make_shared<RecordingWork>(first_child_buffer, &into_sibling)};
  }
  stash.clear();
  for (const Seen* seen : {&child_into_parent, &parent_into_child, &into_sibling}) {
    EXPECT_TRUE(seen->completed);
    EXPECT_TRUE(seen->buffer_alive);
  }
  EXPECT_TRUE(stash.empty());
}

// reset() starts from clear(): the same order holds when a composite layer's forward reuses a stash.
TEST(Stash, ResetCompletesTheExchangeBeforeReleasingItsBuffer) {
  Seen seen;
  Stash stash;
  {
    const Tensor sums = buffer();
    stash.tensors = {sums};
    stash.in_flight = {std::make_shared<RecordingWork>(sums, &seen)};
  }
  stash.reset(3);
  EXPECT_TRUE(seen.completed);
  EXPECT_TRUE(seen.buffer_alive);
  EXPECT_EQ(stash.children.size(), 3u);
  EXPECT_TRUE(stash.tensors.empty() && stash.in_flight.empty());
}

}  // namespace
}  // namespace cleave::layers::stash_test

// batch_p2p (a ring, an all-pairs exchange, self messages, messages cut into pieces, messages beyond one 4 MiB
// progress piece) and split
// (sub-communicators: membership, rank order by key, collectives inside them, ranks left out).
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "tests/mpi/mpi_test_env.hpp"
#include "tests/mpi/tensor_values.hpp"

namespace cleave::testing::comm_p2p_split_test {
namespace {

using comm::P2POp;
using comm::ReduceOp;

Tensor make(std::int64_t count, DType dtype) {
  return Tensor::empty({count}, dtype, MemoryCategory::kActivations, cpu_allocator());
}

std::int64_t count_wrong(const Tensor& t, int from_rank, int salt) {
  std::int64_t wrong = 0;
  for (std::int64_t i = 0; i < t.numel(); ++i) wrong += get_value(t, i) != small_value(from_rank, i, salt);
  return wrong;
}

class P2P : public ::testing::TestWithParam<std::int64_t> {};  // parameter: max_message_elements

// Each rank sends two tensors (different dtypes and tags) to its right neighbour and receives from its left,
// all posted in one batch; sizes differ per sender so a mismatched pairing would be caught.
TEST_P(P2P, RingOfBatchP2P) {
  auto comm = make_world(false, GetParam());
  const int n = comm->size();
  const int r = comm->rank();
  const int right = (r + 1) % n;
  const int left = (r + n - 1) % n;
  for (DType dtype : kAllDTypes) {
    const std::int64_t mine = 1000 + 17 * r;
    const std::int64_t theirs = 1000 + 17 * left;
    Tensor send_a = make(mine, dtype);
    Tensor send_b = make(3, DType::kI64);
    for (std::int64_t i = 0; i < mine; ++i) set_value(send_a, i, small_value(r, i, 1));
    for (std::int64_t i = 0; i < 3; ++i) set_value(send_b, i, small_value(r, i, 2));
    Tensor recv_a = make(theirs, dtype);
    Tensor recv_b = make(3, DType::kI64);
    comm->batch_p2p({P2POp::send(send_a, right, 5), P2POp::send(send_b, right, 6), P2POp::recv(recv_b, left, 6),
                     P2POp::recv(recv_a, left, 5)})
        ->wait();
    EXPECT_EQ(count_wrong(recv_a, left, 1), 0) << dtype_name(dtype) << " from rank " << left;
    EXPECT_EQ(count_wrong(recv_b, left, 2), 0) << "i64 from rank " << left;
  }
}

// Messages are cut into pieces of at most 4 MiB (so waits see them progress, mpi_communicator.hpp) even with
// no max_message_elements limit: odd sizes just past one and two pieces arrive whole, in a ring and through the
// rank-ordered reduction (whose per-peer blocks are cut the same way).
TEST(P2PPieces, MessagesBeyondOneProgressPieceArriveWhole) {
  auto comm = make_world(false);
  const int n = comm->size();
  const int r = comm->rank();
  const int right = (r + 1) % n;
  const int left = (r + n - 1) % n;
  for (auto [dtype, count] : {std::pair{DType::kF32, std::int64_t{(4 << 20) / 4 + 3}},
                              std::pair{DType::kBF16, std::int64_t{(8 << 20) / 2 + 5}}}) {
    Tensor send = make(count, dtype);
    Tensor recv = make(count, dtype);
    for (std::int64_t i = 0; i < count; ++i) set_value(send, i, small_value(r, i, 3));
    comm->batch_p2p({P2POp::send(send, right, 7), P2POp::recv(recv, left, 7)})->wait();
    EXPECT_EQ(count_wrong(recv, left, 3), 0) << dtype_name(dtype) << " x" << count << " from rank " << left;
  }
  const std::int64_t count = (9 << 20) / 4 * n + 7 * n;  // every rank's block beyond two pieces
  Tensor t = make(count, DType::kF32);
  for (std::int64_t i = 0; i < count; ++i) set_value(t, i, small_value(r, i, 4));
  comm->all_reduce(t, ReduceOp::kSum)->wait();
  std::int64_t wrong = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    double expected = 0;
    for (int q = 0; q < n; ++q) expected += small_value(q, i, 4);
    wrong += get_value(t, i) != expected;
  }
  EXPECT_EQ(wrong, 0) << "all_reduce of " << count << " f32";
}

TEST_P(P2P, AllPairsAndSelfInOneBatch) {
  auto comm = make_world(false, GetParam());
  const int n = comm->size();
  const int r = comm->rank();
  std::vector<Tensor> sends;
  std::vector<Tensor> recvs;
  std::vector<P2POp> ops;
  for (int q = 0; q < n; ++q) {
    Tensor s = make(401 + q, DType::kF32);  // rank r sends 401+q elements to q, salted by the receiver
    for (std::int64_t i = 0; i < s.numel(); ++i) set_value(s, i, small_value(r, i, q));
    Tensor v = make(401 + r, DType::kF32);
    sends.push_back(s);
    recvs.push_back(v);
    ops.push_back(P2POp::send(s, q, 9));
    ops.push_back(P2POp::recv(v, q, 9));
  }
  comm->batch_p2p(std::move(ops))->wait();
  for (int q = 0; q < n; ++q) EXPECT_EQ(count_wrong(recvs[static_cast<std::size_t>(q)], q, r), 0) << "from " << q;
}

TEST_P(P2P, TwoMessagesSamePeerSameTagArriveInOrder) {
  auto comm = make_world(false, GetParam());
  const int n = comm->size();
  const int r = comm->rank();
  const int right = (r + 1) % n;
  const int left = (r + n - 1) % n;
  Tensor first = make(300, DType::kI32);
  Tensor second = make(300, DType::kI32);
  for (std::int64_t i = 0; i < 300; ++i) {
    set_value(first, i, small_value(r, i, 7));
    set_value(second, i, small_value(r, i, 8));
  }
  Tensor got_first = make(300, DType::kI32);
  Tensor got_second = make(300, DType::kI32);
  comm->batch_p2p({P2POp::send(first, right), P2POp::send(second, right), P2POp::recv(got_first, left),
                   P2POp::recv(got_second, left)})
      ->wait();
  EXPECT_EQ(count_wrong(got_first, left, 7), 0);
  EXPECT_EQ(count_wrong(got_second, left, 8), 0);
}

INSTANTIATE_TEST_SUITE_P(Pieces, P2P, ::testing::Values(INT32_MAX, 13),
                         [](const auto& info) { return info.param == 13 ? std::string("pieces13") : "whole"; });

// Two groups (even and odd world ranks), ranked in reverse world order by key; a collective inside each;
// world rank 0 (when n > 2) joins none.
TEST(Split, SubgroupsByColorRankedByKey) {
  auto world = make_world();
  const int n = world->size();
  const int r = world->rank();
  const bool left_out = n > 2 && r == 0;
  auto group = world->split(left_out ? -1 : r % 2, -r, r % 2 == 0 ? "even" : "odd");
  if (left_out) {
    EXPECT_EQ(group, nullptr);
  } else {
    ASSERT_NE(group, nullptr);
    std::vector<int> members;
    for (int q = n - 1; q >= 0; --q) {
      if (q % 2 == r % 2 && !(n > 2 && q == 0)) members.push_back(q);
    }
    EXPECT_EQ(group->size(), static_cast<int>(members.size()));
    EXPECT_EQ(group->world_ranks(), members);
    EXPECT_EQ(members[static_cast<std::size_t>(group->rank())], r);
    EXPECT_EQ(group->name(), std::string("world/") + (r % 2 == 0 ? "even" : "odd"));
    Tensor t = make(1009, DType::kI64);
    for (std::int64_t i = 0; i < 1009; ++i) set_value(t, i, small_value(r, i));
    group->all_reduce(t, ReduceOp::kSum)->wait();
    std::int64_t wrong = 0;
    for (std::int64_t i = 0; i < 1009; ++i) {
      double expected = 0;
      for (int q : members) expected += small_value(q, i);
      wrong += get_value(t, i) != expected;
    }
    EXPECT_EQ(wrong, 0);
    // A split of a split.
    auto single = group->split(group->rank(), 0, "self");
    ASSERT_NE(single, nullptr);
    EXPECT_EQ(single->size(), 1);
    EXPECT_EQ(single->world_ranks(), std::vector<int>{r});
    Tensor u = make(5, DType::kF32);
    for (std::int64_t i = 0; i < 5; ++i) set_value(u, i, small_value(r, i));
    single->all_reduce(u, ReduceOp::kSum)->wait();
    EXPECT_EQ(count_wrong(u, r, 0), 0);
  }
  world->barrier()->wait();
}

TEST(Split, GroupsInheritDeterministicModeAndTimeout) {
  auto world = make_world(true);
  auto group = world->split(0, world->rank());
  ASSERT_NE(group, nullptr);
  EXPECT_TRUE(group->options().deterministic);
  EXPECT_EQ(group->options().timeout_s, kTestTimeoutS);
  EXPECT_EQ(group->backend(), "mpi");
}

}  // namespace
}  // namespace cleave::testing::comm_p2p_split_test

// Collectives of the MPI backend against closed-form expectations, nccl-tests style: every rank fills its
// input from small_value(rank, i), so the expected result of every element is known without communication;
// each check counts the wrong elements (#wrong) and must find none.
//
// Swept: every dtype; sizes 0, 1, 2, a prime, a size far beyond one message piece; sum and max; in-place
// forms; in four modes: plain, deterministic, and both with messages cut into pieces of 257 elements (which
// exercises the > INT_MAX path without 8 GiB tensors).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/mpi/mpi_test_env.hpp"
#include "tests/mpi/tensor_values.hpp"

namespace cleave::testing::comm_collectives_test {
namespace {

using comm::ReduceOp;

struct Mode {
  const char* name;
  bool deterministic;
  std::int64_t max_message_elements;
};

const std::int64_t kSizes[] = {0, 1, 2, 13, 1021, 40009};

Tensor make(std::int64_t count, DType dtype) {
  return Tensor::empty({count}, dtype, MemoryCategory::kActivations, cpu_allocator());
}

// First mismatch, for the failure message.
struct Wrong {
  std::int64_t count = 0;
  std::string first;
  void check(std::int64_t i, double got, double expected) {
    if (got == expected) return;
    if (count++ == 0) first = fmt::format("element {}: got {} expected {}", i, got, expected);
  }
};

class Collectives : public ::testing::TestWithParam<Mode> {
 protected:
  void SetUp() override { comm_ = make_world(GetParam().deterministic, GetParam().max_message_elements); }
  int n() const { return comm_->size(); }
  int r() const { return comm_->rank(); }
  // Per-rank block sizes beyond the piece limit are refused by an integer reduce_scatter (MPI's own); point-to-
  // point protocols cut into pieces carry the rest: every floating-point reduction and every all_gather.
  bool refused(std::int64_t per_rank, DType dtype, bool reduction) const {
    const bool p2p = !reduction || comm::is_floating(dtype);
    return per_rank > GetParam().max_message_elements && !p2p;
  }
  std::unique_ptr<comm::MpiCommunicator> comm_;
};

TEST_P(Collectives, AllReduceSumAndMaxEveryDtypeAndSize) {
  for (DType dtype : kAllDTypes) {
    for (std::int64_t count : kSizes) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        Tensor t = make(count, dtype);
        for (std::int64_t i = 0; i < count; ++i) set_value(t, i, small_value(r(), i, 1));
        comm_->all_reduce(t, op)->wait();
        Wrong wrong;
        for (std::int64_t i = 0; i < count; ++i) {
          double expected = op == ReduceOp::kSum ? 0 : small_value(0, i, 1);
          for (int q = 0; q < n(); ++q) {
            expected = op == ReduceOp::kSum ? expected + small_value(q, i, 1)
                                            : std::max<double>(expected, small_value(q, i, 1));
          }
          wrong.check(i, get_value(t, i), expected);
        }
        EXPECT_EQ(wrong.count, 0) << "all_reduce " << comm::reduce_op_name(op) << " " << dtype_name(dtype) << " x"
                                  << count << ": " << wrong.first;
      }
    }
  }
}

TEST_P(Collectives, ReduceScatterEveryDtypeAndSizeInAndOutOfPlace) {
  for (DType dtype : kAllDTypes) {
    for (std::int64_t count : kSizes) {
      for (bool in_place : {false, true}) {
        Tensor input = make(count * n(), dtype);
        for (std::int64_t i = 0; i < count * n(); ++i) set_value(input, i, small_value(r(), i, 2));
        Tensor output = in_place ? input.slice(r() * count, (r() + 1) * count) : make(count, dtype);
        if (refused(count, dtype, true)) {
          EXPECT_THROW(comm_->reduce_scatter(input, output), Error) << dtype_name(dtype) << " x" << count;
          continue;
        }
        comm_->reduce_scatter(input, output)->wait();
        Wrong wrong;
        for (std::int64_t i = 0; i < count; ++i) {
          double expected = 0;
          for (int q = 0; q < n(); ++q) expected += small_value(q, r() * count + i, 2);
          wrong.check(i, get_value(output, i), expected);
        }
        EXPECT_EQ(wrong.count, 0) << "reduce_scatter " << dtype_name(dtype) << " x" << count
                                  << (in_place ? " in place: " : ": ") << wrong.first;
      }
    }
  }
}

TEST_P(Collectives, AllGatherEveryDtypeAndSizeInAndOutOfPlace) {
  for (DType dtype : kAllDTypes) {
    for (std::int64_t count : kSizes) {
      for (bool in_place : {false, true}) {
        Tensor output = make(count * n(), dtype);
        for (std::int64_t i = 0; i < count * n(); ++i) set_value(output, i, 99);  // must all be overwritten
        Tensor input = in_place ? output.slice(r() * count, (r() + 1) * count) : make(count, dtype);
        for (std::int64_t i = 0; i < count; ++i) set_value(input, i, small_value(r(), i, 3));
        if (refused(count, dtype, false)) {
          EXPECT_THROW(comm_->all_gather(input, output), Error) << dtype_name(dtype) << " x" << count;
          continue;
        }
        comm_->all_gather(input, output)->wait();
        Wrong wrong;
        for (int q = 0; q < n(); ++q) {
          for (std::int64_t i = 0; i < count; ++i) {
            wrong.check(q * count + i, get_value(output, q * count + i), small_value(q, i, 3));
          }
        }
        EXPECT_EQ(wrong.count, 0) << "all_gather " << dtype_name(dtype) << " x" << count
                                  << (in_place ? " in place: " : ": ") << wrong.first;
      }
    }
  }
}

TEST_P(Collectives, BroadcastFromEveryRoot) {
  for (DType dtype : kAllDTypes) {
    for (std::int64_t count : kSizes) {
      for (int root = 0; root < n(); ++root) {
        Tensor t = make(count, dtype);
        for (std::int64_t i = 0; i < count; ++i) set_value(t, i, small_value(r(), i, 4));
        comm_->broadcast(t, root)->wait();
        Wrong wrong;
        for (std::int64_t i = 0; i < count; ++i) wrong.check(i, get_value(t, i), small_value(root, i, 4));
        EXPECT_EQ(wrong.count, 0) << "broadcast " << dtype_name(dtype) << " x" << count << " root " << root << ": "
                                  << wrong.first;
      }
    }
  }
}

// Several Works in flight, completed in reverse order, one of them only through its destructor.
TEST_P(Collectives, ManyWorksInFlightCompleteInAnyOrder) {
  const std::int64_t count = 3001;
  std::vector<Tensor> tensors;
  std::vector<comm::WorkPtr> works;
  for (int k = 0; k < 6; ++k) {
    Tensor t = make(count, kAllDTypes[k % 6]);
    for (std::int64_t i = 0; i < count; ++i) set_value(t, i, small_value(r(), i, 10 + k));
    works.push_back(comm_->all_reduce(t, ReduceOp::kSum));
    tensors.push_back(t);
  }
  works.push_back(comm_->barrier());
  for (auto it = works.rbegin(); it != works.rend(); ++it) {
    if (it == works.rbegin() + 2) {
      it->reset();  // destructor completes it
    } else {
      (*it)->wait();
      EXPECT_TRUE((*it)->test());
    }
  }
  for (int k = 0; k < 6; ++k) {
    Wrong wrong;
    for (std::int64_t i = 0; i < count; ++i) {
      double expected = 0;
      for (int q = 0; q < n(); ++q) expected += small_value(q, i, 10 + k);
      wrong.check(i, get_value(tensors[static_cast<std::size_t>(k)], i), expected);
    }
    EXPECT_EQ(wrong.count, 0) << "in-flight op " << k << ": " << wrong.first;
  }
}

TEST_P(Collectives, TestPollsToCompletion) {
  Tensor t = make(777, DType::kF32);
  for (std::int64_t i = 0; i < 777; ++i) set_value(t, i, small_value(r(), i));
  auto work = comm_->all_reduce(t, ReduceOp::kSum);
  int polls = 0;
  while (!work->test()) ++polls;
  EXPECT_TRUE(work->test());
  Wrong wrong;
  for (std::int64_t i = 0; i < 777; ++i) {
    double expected = 0;
    for (int q = 0; q < n(); ++q) expected += small_value(q, i);
    wrong.check(i, get_value(t, i), expected);
  }
  EXPECT_EQ(wrong.count, 0) << wrong.first;
}

TEST_P(Collectives, BadArgumentsAreRefusedOnEveryRankBeforeAnyTraffic) {
  Tensor a = make(12, DType::kF32);
  Tensor b = make(5, DType::kF32);
  Tensor c = make(12, DType::kI32);
  try {
    comm_->all_gather(b, a);
    if (n() * 5 != 12) ADD_FAILURE() << "all_gather with a wrong output size was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected input 5 elements"), std::string::npos) << e.what();
  }
  EXPECT_THROW(comm_->reduce_scatter(a, c.slice(0, 12 / std::max(1, n()))), Error);  // dtype mismatch
  EXPECT_THROW(comm_->broadcast(a, n()), Error);
  EXPECT_THROW(comm_->reduce_scatter(a, a.slice(0, 1)), Error);  // overlaps other than as own block
  EXPECT_THROW(comm_->batch_p2p({comm::P2POp::send(a, n())}), Error);
  EXPECT_THROW(comm_->batch_p2p({comm::P2POp::send(a, 0, -1)}), Error);
  EXPECT_THROW(comm_->all_reduce(Tensor(), ReduceOp::kSum), Error);
  comm_->barrier()->wait();
}

INSTANTIATE_TEST_SUITE_P(Modes, Collectives,
                         ::testing::Values(Mode{"plain", false, INT32_MAX}, Mode{"deterministic", true, INT32_MAX},
                                           Mode{"pieces257", false, 257}, Mode{"deterministic_pieces257", true, 257}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace cleave::testing::comm_collectives_test

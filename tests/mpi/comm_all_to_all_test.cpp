// Communicator::all_to_all_v and exchange_counts (expert parallelism's dispatch, layers/moe/expert_dispatch.hpp):
// variable counts per pair, blocks of 0 rows (a rank that receives nothing, a rank that sends nothing), the counts
// exchanged first, every element checked against a closed form of (source, destination, row, column), and bad
// counts refused with the op named.
#include <gtest/gtest.h>

#include <vector>

#include "engine/core/error.hpp"
#include "tests/mpi/mpi_test_env.hpp"

namespace cleave::testing::comm_all_to_all_test {
namespace {

constexpr std::int64_t kWidth = 3;

// Rows rank `from` sends to rank `to`: 0 for some pairs (the last rank receives nothing from anyone when `starve`).
std::int64_t rows(int from, int to, int n, bool starve) {
  if (starve && to == n - 1) return 0;
  return (from * 3 + to * 5 + 1) % 4;
}

float value(int from, int to, std::int64_t row, std::int64_t col) {
  return static_cast<float>(1000 * from + 100 * to + 10 * row + col) + 0.25f;
}

TEST(AllToAllV, VariableCountsWithEmptyBlocks) {
  auto comm = make_world(false);
  const int n = comm->size(), r = comm->rank();
  for (bool starve : {false, true}) {
    SCOPED_TRACE(starve ? "last rank receives nothing" : "all ranks receive");
    // The counts exchange first: each rank knows only what it sends.
    Tensor send_counts = Tensor::empty({n, 1}, DType::kI64, MemoryCategory::kCommunication, cpu_allocator());
    Tensor recv_counts = Tensor::empty({n, 1}, DType::kI64, MemoryCategory::kCommunication, cpu_allocator());
    std::vector<std::int64_t> send_rows(static_cast<std::size_t>(n));
    std::int64_t total = 0;
    for (int q = 0; q < n; ++q) {
      send_rows[static_cast<std::size_t>(q)] = rows(r, q, n, starve);
      send_counts.data<std::int64_t>()[q] = send_rows[static_cast<std::size_t>(q)];
      total += send_rows[static_cast<std::size_t>(q)];
    }
    comm::exchange_counts(*comm, send_counts, recv_counts)->wait();
    std::vector<std::int64_t> recv_rows(static_cast<std::size_t>(n));
    std::int64_t incoming = 0;
    for (int p = 0; p < n; ++p) {
      recv_rows[static_cast<std::size_t>(p)] = recv_counts.data<std::int64_t>()[p];
      EXPECT_EQ(recv_rows[static_cast<std::size_t>(p)], rows(p, r, n, starve)) << "count from rank " << p;
      incoming += recv_rows[static_cast<std::size_t>(p)];
    }
    Tensor send = Tensor::empty({total, kWidth}, DType::kF32, MemoryCategory::kCommunication, cpu_allocator());
    std::int64_t at = 0;
    for (int q = 0; q < n; ++q) {
      for (std::int64_t i = 0; i < send_rows[static_cast<std::size_t>(q)]; ++i, ++at) {
        for (std::int64_t c = 0; c < kWidth; ++c) send.data<float>()[at * kWidth + c] = value(r, q, i, c);
      }
    }
    Tensor recv = Tensor::empty({incoming, kWidth}, DType::kF32, MemoryCategory::kCommunication, cpu_allocator());
    for (std::int64_t i = 0; i < recv.numel(); ++i) recv.data<float>()[i] = -1.0f;  // poisoned
    comm->all_to_all_v(send, send_rows, recv, recv_rows)->wait();
    std::int64_t wrong = 0;
    at = 0;
    for (int p = 0; p < n; ++p) {
      for (std::int64_t i = 0; i < recv_rows[static_cast<std::size_t>(p)]; ++i, ++at) {
        for (std::int64_t c = 0; c < kWidth; ++c) wrong += recv.data<float>()[at * kWidth + c] != value(p, r, i, c);
      }
    }
    EXPECT_EQ(wrong, 0);
    if (starve && r == n - 1) {
      EXPECT_EQ(incoming, 0);
    }
  }
}

TEST(AllToAllV, CountsThatDoNotCoverTheTensorAreRefused) {
  auto comm = make_world(false);
  const int n = comm->size();
  Tensor t = Tensor::empty({2, kWidth}, DType::kF32, MemoryCategory::kCommunication, cpu_allocator());
  const std::vector<std::int64_t> zero(static_cast<std::size_t>(n), 0);
  try {
    comm->all_to_all_v(t, zero, t.slice(0, 0), zero);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("all_to_all_v"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("sum to 0 rows"), std::string::npos) << e.what();
  }
  comm->barrier()->wait();
}

}  // namespace
}  // namespace cleave::testing::comm_all_to_all_test

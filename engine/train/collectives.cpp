// Typed host-side collectives (see collectives.hpp). Bytes travel in i64 words (the communicator moves typed
// tensors; every rank pads its payload to the longest rank's word count).
#include "engine/train/collectives.hpp"

#include <algorithm>

#include "engine/core/error.hpp"
#include "engine/core/tensor.hpp"

namespace cleave::train {

std::vector<std::vector<std::byte>> all_gather_bytes(comm::Communicator& comm, std::span<const std::byte> mine) {
  const int ranks = comm.size();
  Tensor length = Tensor::empty({1}, DType::kI64, MemoryCategory::kCommunication, cpu_allocator());
  length.data<std::int64_t>()[0] = static_cast<std::int64_t>(mine.size());
  Tensor lengths = Tensor::empty({ranks}, DType::kI64, MemoryCategory::kCommunication, cpu_allocator());
  comm.all_gather(length, lengths)->wait();
  std::int64_t longest = 0;
  for (std::int64_t v : lengths.span<std::int64_t>()) longest = std::max(longest, v);
  const std::int64_t words = std::max<std::int64_t>(1, (longest + 7) / 8);
  Tensor payload = Tensor::zeros({words}, DType::kI64, MemoryCategory::kCommunication, cpu_allocator());
  if (!mine.empty()) std::memcpy(payload.raw_data(), mine.data(), mine.size());
  Tensor all = Tensor::empty({words * ranks}, DType::kI64, MemoryCategory::kCommunication, cpu_allocator());
  comm.all_gather(payload, all)->wait();
  std::vector<std::vector<std::byte>> out(static_cast<std::size_t>(ranks));
  const auto* bytes = static_cast<const std::byte*>(all.raw_data());
  for (int r = 0; r < ranks; ++r) {
    const std::int64_t n = lengths.data<std::int64_t>()[r];
    const std::byte* from = bytes + static_cast<std::int64_t>(r) * words * 8;
    out[static_cast<std::size_t>(r)].assign(from, from + n);
  }
  return out;
}

std::vector<double> reduce_doubles(comm::Communicator& comm, const std::vector<double>& values, comm::ReduceOp op) {
  std::vector<double> out(values.size());
  reduce_doubles_into(comm, values, out, op);
  return out;
}

void reduce_doubles_into(comm::Communicator& comm, std::span<const double> values, std::span<double> out,
                         comm::ReduceOp op) {
  CLEAVE_ASSERT(out.size() == values.size(), "reduce_doubles_into: {} values into {}", values.size(), out.size());
  // Every rank sends the same count (the contract), so one all_gather of the exact bit patterns suffices.
  const auto count = static_cast<std::int64_t>(values.size());
  Tensor mine = Tensor::empty({count}, DType::kI64, MemoryCategory::kCommunication, cpu_allocator());
  std::memcpy(mine.raw_data(), values.data(), values.size() * sizeof(double));
  Tensor all = Tensor::empty({count * comm.size()}, DType::kI64, MemoryCategory::kCommunication, cpu_allocator());
  comm.all_gather(mine, all)->wait();
  const auto* gathered = static_cast<const double*>(all.raw_data());
  for (std::int64_t i = 0; i < count; ++i) {
    double acc = gathered[i];
    for (int r = 1; r < comm.size(); ++r) {
      const double v = gathered[static_cast<std::int64_t>(r) * count + i];
      acc = op == comm::ReduceOp::kMax ? std::max(acc, v) : acc + v;
    }
    out[static_cast<std::size_t>(i)] = acc;
  }
}

}  // namespace cleave::train

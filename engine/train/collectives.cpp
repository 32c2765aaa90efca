// Typed host-side collectives (see collectives.hpp). Bytes travel in i64 words (the communicator moves typed
// tensors; every rank pads its payload to the longest rank's word count).
#include "engine/train/collectives.hpp"

#include <algorithm>

#include "engine/core/error.hpp"
#include "engine/core/tensor.hpp"

namespace cleave::train {

std::vector<std::vector<std::byte>> all_gather_bytes(comm::Communicator& comm, std::span<const std::byte> mine) {
  const int ranks = comm.size();
  Tensor length = Tensor::empty({1}, DType::kI64, MemoryCategory::kCommunication);
  length.data<std::int64_t>()[0] = static_cast<std::int64_t>(mine.size());
  Tensor lengths = Tensor::empty({ranks}, DType::kI64, MemoryCategory::kCommunication);
  comm.all_gather(length, lengths)->wait();
  std::int64_t longest = 0;
  for (std::int64_t v : lengths.span<std::int64_t>()) longest = std::max(longest, v);
  const std::int64_t words = std::max<std::int64_t>(1, (longest + 7) / 8);
  Tensor payload = Tensor::zeros({words}, DType::kI64, MemoryCategory::kCommunication);
  if (!mine.empty()) std::memcpy(payload.raw_data(), mine.data(), mine.size());
  Tensor all = Tensor::empty({words * ranks}, DType::kI64, MemoryCategory::kCommunication);
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
  const auto gathered = all_gather_values<double>(comm, values);
  std::vector<double> out = gathered.front();
  for (std::size_t r = 1; r < gathered.size(); ++r) {
    CLEAVE_ASSERT(gathered[r].size() == out.size(), "reduce_doubles: rank {} sent {} values, rank 0 sent {}", r,
                  gathered[r].size(), out.size());
    for (std::size_t i = 0; i < out.size(); ++i) {
      out[i] = op == comm::ReduceOp::kMax ? std::max(out[i], gathered[r][i]) : out[i] + gathered[r][i];
    }
  }
  return out;
}

}  // namespace cleave::train

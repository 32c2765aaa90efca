// See link_probe.hpp.
#include "engine/comm/link_probe.hpp"

#include <algorithm>
#include <chrono>

#include "engine/core/error.hpp"
#include "engine/core/tensor.hpp"

namespace cleave::comm {

std::vector<std::pair<double, double>> time_ping_pong(Communicator& comm, const std::vector<std::int64_t>& sizes,
                                                      int repeats) {
  CLEAVE_CHECK(comm.size() >= 2, "link probe: needs 2 or more ranks, got {}", comm.size());
  CLEAVE_CHECK(repeats >= 1, "link probe: repeats must be >= 1, got {}", repeats);
  using clock = std::chrono::steady_clock;
  const int rank = comm.rank();
  const bool paired = rank < comm.size() - comm.size() % 2;
  const int peer = rank % 2 == 0 ? rank + 1 : rank - 1;
  std::vector<std::pair<double, double>> points;
  for (std::int64_t bytes : sizes) {
    CLEAVE_CHECK(bytes >= 4 && bytes % 4 == 0, "link probe: message size {} is not a positive multiple of 4", bytes);
    Tensor buf = Tensor::zeros(Shape{bytes / 4}, DType::kF32, MemoryCategory::kWorkspace, cpu_allocator());
    std::vector<double> times;
    comm.barrier()->wait();
    for (int rep = 0; rep <= repeats && paired; ++rep) {
      const auto start = clock::now();
      if (rank % 2 == 0) {
        comm.batch_p2p({P2POp::send(buf, peer)})->wait();
        comm.batch_p2p({P2POp::recv(buf, peer)})->wait();
      } else {
        comm.batch_p2p({P2POp::recv(buf, peer)})->wait();
        comm.batch_p2p({P2POp::send(buf, peer)})->wait();
      }
      if (rep > 0) times.push_back(std::chrono::duration<double>(clock::now() - start).count() / 2);
    }
    float mine = 0;
    if (!times.empty()) {
      std::sort(times.begin(), times.end());
      mine = static_cast<float>(times[times.size() / 2]);
    }
    Tensor slowest = Tensor::from_floats(std::span<const float>(&mine, 1), Shape{1}, MemoryCategory::kWorkspace);
    comm.all_reduce(slowest, ReduceOp::kMax)->wait();
    points.push_back({static_cast<double>(bytes), static_cast<double>(slowest.data<float>()[0])});
  }
  return points;
}

}  // namespace cleave::comm

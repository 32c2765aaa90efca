// Staged MPI world for the communicator factory (see staged_world.hpp).
#include "engine/comm/cuda/staged_world.hpp"

#include <utility>

#include "engine/comm/cuda/staged_communicator.hpp"

namespace cleave::comm {

std::unique_ptr<Communicator> make_staged_world(std::unique_ptr<Communicator> inner) {
  return std::make_unique<StagedCommunicator>(std::move(inner));
}

}  // namespace cleave::comm

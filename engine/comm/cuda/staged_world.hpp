// The staged half of the world communicator factory (engine/comm/make_communicator.hpp): an MPI world that
// carries GPU tensors through pinned host memory. Compiled into cleave_comm_cuda (CUDA builds only); this
// header includes no CUDA header so the factory, a CPU file, can call it under #if CLEAVE_WITH_CUDA.
#pragma once

#include <memory>

#include "engine/comm/communicator.hpp"

namespace cleave::comm {

// Wraps `inner` (a communicator for CPU tensors) in a StagedCommunicator; backend() is "<inner>+staging".
std::unique_ptr<Communicator> make_staged_world(std::unique_ptr<Communicator> inner);

}  // namespace cleave::comm

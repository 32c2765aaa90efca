// P2PProgress (parallel.p2p_progress) with its name table (engine/core/enum_names.hpp). Header-only so the
// config reader can name it without linking MPI.
//
// "auto" = a progress thread when MPI grants MPI_THREAD_MULTIPLE and the communicator has peers; "thread" =
// always (an error naming the key where MPI does not allow it); "off" = never.
#pragma once

#include <array>

#include "engine/core/enum_names.hpp"

namespace cleave::comm {

enum class P2PProgress { kAuto, kThread, kOff };
constexpr std::array<EnumName<P2PProgress>, 3> enum_names(P2PProgress) {
  return {{{P2PProgress::kAuto, "auto"}, {P2PProgress::kThread, "thread"}, {P2PProgress::kOff, "off"}}};
}

}  // namespace cleave::comm

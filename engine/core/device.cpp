// Device names.
#include "engine/core/device.hpp"

#include "engine/core/error.hpp"

namespace cleave {

std::string Device::str() const { return is_cpu() ? std::string("cpu") : fmt::format("cuda:{}", index); }

}  // namespace cleave

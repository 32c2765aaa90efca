// Device (device.hpp): a device's name as messages and configs write it, "cpu" or "cuda:N"; the one spelling
// Device::str gives, so an error and a config name the same device alike.
#include "engine/core/device.hpp"

#include "engine/core/error.hpp"

namespace cleave {

std::string Device::str() const { return is_cpu() ? std::string("cpu") : fmt::format("cuda:{}", index); }

}  // namespace cleave

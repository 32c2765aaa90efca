// Device names.
#include "engine/core/device.hpp"

#include <charconv>

#include "engine/core/error.hpp"

namespace cleave {

std::string Device::str() const { return is_cpu() ? std::string("cpu") : fmt::format("cuda:{}", index); }

Device parse_device(std::string_view text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  if (text.starts_with("cuda:")) {
    int index = -1;
    auto rest = text.substr(5);
    auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), index);
    if (ec == std::errc() && ptr == rest.data() + rest.size() && index >= 0) return Device::cuda(index);
  }
  CLEAVE_THROW("unknown device '{}': expected cpu, cuda or cuda:N", text);
}

}  // namespace cleave

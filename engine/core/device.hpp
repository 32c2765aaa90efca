// Device: where a tensor lives. CPU is always available; cuda:N only in CUDA builds with a GPU.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "engine/core/enum_names.hpp"

namespace cleave {

enum class DeviceType { kCpu, kCuda };  // device.type "cpu" | "cuda"
constexpr std::array<EnumName<DeviceType>, 2> enum_names(DeviceType) {
  return {{{DeviceType::kCpu, "cpu"}, {DeviceType::kCuda, "cuda"}}};
}

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;

  static Device cpu() { return {DeviceType::kCpu, 0}; }
  static Device cuda(int index) { return {DeviceType::kCuda, index}; }
  bool is_cpu() const { return type == DeviceType::kCpu; }
  bool is_cuda() const { return type == DeviceType::kCuda; }
  std::string str() const;  // "cpu", "cuda:1"
  friend bool operator==(const Device&, const Device&) = default;
};

}  // namespace cleave

// See health_check.hpp.
#include "engine/supervise/health_check.hpp"

#include <cstdlib>

#include <fmt/format.h>

#include "engine/core/executable.hpp"
#include "engine/core/log.hpp"

namespace cleave::supervise {

std::string health_check_line(const std::string& command, const Slot& slot) {
  return fmt::format("CLEAVE_SLOT_HOST={} CLEAVE_SLOT_INDEX={} sh -c {} > /dev/null 2>&1", shell_quote(slot.host),
                     slot.index, shell_quote(command));
}

std::vector<bool> check_health(const std::string& command, const std::vector<Slot>& slots) {
  std::vector<bool> healthy(slots.size(), true);
  if (command.empty()) return healthy;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    healthy[i] = std::system(health_check_line(command, slots[i]).c_str()) == 0;
    if (!healthy[i]) {
      log::warn("run: health check failed on slot {}:{} ({}); the slot is dropped", slots[i].host, slots[i].index,
                command);
    }
  }
  return healthy;
}

}  // namespace cleave::supervise

// Out-of-line pieces of error.hpp (keeps fmt formatting of the bug banner out of every call site).
#include "engine/core/error.hpp"

namespace cleave::detail {

void throw_internal(const char* file, int line, const char* condition, const std::string& message) {
  throw InternalError(fmt::format("internal error (a bug in Cleave, please report it): `{}` failed at {}:{}{}{}",
                                  condition, file, line, message.empty() ? "" : ": ", message));
}

}  // namespace cleave::detail

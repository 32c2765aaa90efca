// Programs and shell words. Whether a program can be started, as execvp would find it: for the launchers `cleave run` and `cleave plan --trial`
// start, checked before any work so a missing one is bad input named at once, not a failure after minutes.
#pragma once

#include <string>

namespace cleave {

// `program` is a path (holding a '/') to an executable regular file, or a name an executable regular file in one of
// the PATH directories has ("/usr/bin:/bin" when PATH is unset).
bool can_execute(const std::string& program);

// `text` as one single-quoted shell word ('it'\''s' for it's), for a command line given to sh or popen.
std::string shell_quote(const std::string& text);

// Why can_execute(program) is false, for a message: "not an executable file" or "not found in PATH".
const char* why_not_executable(const std::string& program);

}  // namespace cleave

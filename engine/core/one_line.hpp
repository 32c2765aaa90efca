// Keeping user-facing error messages on one line when they quote input (docs/testing.md, Fuzzing: every bad input
// yields one cleave::Error line). A JSON key "a\nb", a tensor name or a --set argument may hold control
// characters; a reader's outermost handler passes its Error through rethrow_one_line, which escapes them. A long
// message quoted in a summary line is shortened at a word boundary (shorten_at_word), never mid-word.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "engine/core/error.hpp"

namespace cleave {

// `text` with control characters escaped: \n, \r, \t, and other bytes below 0x20 and 0x7f as \xNN.
std::string escape_control(std::string_view text);

// `text` when it has at most `limit` characters; else its words up to that length followed by " ..." (never cut
// mid-word, trailing punctuation of the cut dropped). For messages quoted inside a summary line.
std::string shorten_at_word(std::string_view text, std::size_t limit);

// For a catch (const Error&) block: rethrows the Error being handled unchanged (type kept) when its message
// has no control characters, else an Error with escape_control(message).
[[noreturn]] void rethrow_one_line(const Error& error);

}  // namespace cleave

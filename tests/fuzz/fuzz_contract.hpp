// The contract every fuzz target asserts (docs/testing.md, "Fuzzing"): an input either parses or yields one
// cleave::Error whose message is a single non-empty line. Any other exception (a JSON-library exception, an
// InternalError from a CLEAVE_ASSERT, std::bad_alloc, ...) is a violation: the target prints it and aborts,
// and libFuzzer saves the input as a crash. Sanitizer reports (ASan, UBSan with -fno-sanitize-recover) and
// allocations past -malloc_limit_mb end the run the same way.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>
#include <typeinfo>

#include "engine/core/error.hpp"

namespace cleave::fuzz {

[[noreturn]] inline void violation(std::string_view target, std::string_view what, std::string_view message) {
  std::fprintf(stderr, "\n%.*s: contract violated: %.*s: %.*s\n", static_cast<int>(target.size()), target.data(),
               static_cast<int>(what.size()), what.data(), static_cast<int>(message.size()), message.data());
  std::abort();
}

// Runs `body`. Returns true when it returned, false when it threw a well-formed cleave::Error; aborts on
// anything else.
template <typename Body>
bool parses_or_errors(std::string_view target, Body&& body) {
  try {
    body();
    return true;
  } catch (const Error& e) {
    const std::string_view message = e.what();
    if (message.empty()) violation(target, "cleave::Error", "(empty message)");
    if (message.find('\n') != std::string_view::npos) violation(target, "cleave::Error spanning lines", message);
    return false;
  } catch (const std::exception& e) {
    violation(target, typeid(e).name(), e.what());
  } catch (...) {
    violation(target, "an exception not derived from std::exception", "");
  }
}

// An internal consistency check of the target itself (a round trip that must hold): aborts when false.
inline void expect(bool condition, std::string_view target, std::string_view what) {
  if (!condition) violation(target, "broken invariant", what);
}

}  // namespace cleave::fuzz

// error_of: the message of the cleave::Error a callable throws, or "(no error)" when it throws none, so a test can
// check what an error names (`EXPECT_NE(error_of([&] { ... }).find("stage 0"), std::string::npos)`) and a failure
// prints what came instead. Only cleave::Error is caught: anything else a callable throws fails the test as it would
// without the helper. Shared by the unit tests that had each written the same helper.
#pragma once

#include <string>
#include <utility>

#include "engine/core/error.hpp"

namespace cleave::testing {

template <typename Callable>
std::string error_of(Callable&& callable) {
  try {
    std::forward<Callable>(callable)();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace cleave::testing

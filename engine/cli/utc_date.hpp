// Today's date in UTC as YYYY-MM-DD: the date `cleave profile` and `cleave profile --gemm` write into the
// profile's name.
#pragma once

#include <ctime>
#include <string>

namespace cleave::cli {

inline std::string utc_date_today() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d", std::gmtime(&now));
  return text;
}

}  // namespace cleave::cli

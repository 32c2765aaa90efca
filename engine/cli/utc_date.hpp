// Today's date in UTC as YYYY-MM-DD: the date `cleave profile` writes into a profile's name and its `profiled` key.
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

// device.blas: the default is "auto"; an unknown name is refused naming the key, the value and the names; a
// library this build does not link is refused naming the key, the value and what is available; a built one is
// read and written back. Whether BLIS or oneDNN is built decides which branch each name takes, never whether a
// check runs (every name is checked one way or the other).
#include <gtest/gtest.h>

#include <string>

#include "engine/config/config.hpp"
#include "engine/core/error.hpp"

namespace cleave::config::device_blas_test {
namespace {

std::string error_of(const std::string& value) {
  try {
    (void)parse_config("{}", "run.json", {"device.blas=" + value});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DeviceBlas, DefaultIsAuto) { EXPECT_EQ(parse_config("{}").device.blas, CpuBlas::kAuto); }

TEST(DeviceBlas, UnknownNameIsRefusedWithTheNames) {
  const std::string message = error_of("mkl");
  for (const char* needle : {"device.blas", "\"mkl\"", "auto", "openblas", "blis", "onednn"}) {
    EXPECT_NE(message.find(needle), std::string::npos) << "lacks '" << needle << "': " << message;
  }
}

TEST(DeviceBlas, EachNameIsReadWhenBuiltAndRefusedNamingTheAvailableOnesWhenNot) {
  const std::string available = ops::cpu_blas_available();
  EXPECT_NE(available.find("auto, openblas"), std::string::npos) << available;
  for (const auto& e : enum_names(CpuBlas{})) {
    const std::string name(e.name);
    if (ops::cpu_blas_built(e.value)) {
      const RunConfig c = parse_config("{}", "run.json", {"device.blas=" + name});
      EXPECT_EQ(c.device.blas, e.value) << name;
      EXPECT_NE(to_json(c).find("\"blas\": \"" + name + "\""), std::string::npos) << name;
      EXPECT_NE(available.find(name), std::string::npos) << name << " built but not listed: " << available;
    } else {
      const std::string message = error_of(name);
      for (const std::string& needle : {std::string("device.blas"), "\"" + name + "\"", std::string("not built"),
                                        "available: " + available}) {
        EXPECT_NE(message.find(needle), std::string::npos) << "lacks '" << needle << "': " << message;
      }
      EXPECT_EQ(available.find(name), std::string::npos) << name << " not built but listed: " << available;
    }
  }
}

}  // namespace
}  // namespace cleave::config::device_blas_test

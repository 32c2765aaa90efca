// Error types and checking macros (docs/architecture.md).
//
// CLEAVE_CHECK is for user or input errors: the message says what was expected, what was found and where
// (config key, file, rank). CLEAVE_ASSERT is for internal invariants: its message says it is a bug.
// Library code throws; only main() turns an exception into an exit code.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace cleave {

// A user-facing error: bad config, bad data file, impossible layout.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A user error caused by the value of one config key. what() is "<key>: <detail>", e.g.
// "model.d_model: 100 is not divisible by model.n_heads 3 ...". Checks that libraries run on config values
// (partition's model and tensor-parallel rules) throw it, so the config layer can report the same check
// under the file or --set the key came from instead of writing the rule a second time.
class ConfigKeyError : public Error {
 public:
  ConfigKeyError(std::string key, std::string detail)
      : Error(key + ": " + detail), key_(std::move(key)), detail_(std::move(detail)) {}
  const std::string& key() const { return key_; }        // "model.d_model"
  const std::string& detail() const { return detail_; }  // the message after "<key>: "

 private:
  std::string key_;
  std::string detail_;
};

// A violated internal invariant; always a bug in Cleave.
class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& message) : std::logic_error(message) {}
};

// An allocation refused by a device allocator (real exhaustion or the configured cap).
class OutOfMemoryError : public Error {
 public:
  explicit OutOfMemoryError(const std::string& message) : Error(message) {}
};

// A failure reported by a vendor library (CUDA, cuBLAS, cuDNN, NCCL, MPI).
class BackendError : public Error {
 public:
  explicit BackendError(const std::string& message) : Error(message) {}
};

namespace detail {
[[noreturn]] void throw_internal(const char* file, int line, const char* condition, const std::string& message);
}  // namespace detail

}  // namespace cleave

#define CLEAVE_CHECK(cond, ...)                                   \
  do {                                                            \
    if (!(cond)) [[unlikely]] {                                   \
      throw ::cleave::Error(::fmt::format(__VA_ARGS__));          \
    }                                                             \
  } while (0)

#define CLEAVE_THROW(...) throw ::cleave::Error(::fmt::format(__VA_ARGS__))

// CLEAVE_CHECK for a rule on one config key: throws ConfigKeyError(key, formatted detail).
#define CLEAVE_CHECK_KEY(cond, key, ...)                                            \
  do {                                                                            \
    if (!(cond)) [[unlikely]] {                                                   \
      throw ::cleave::ConfigKeyError(key, ::fmt::format(__VA_ARGS__));            \
    }                                                                             \
  } while (0)

#define CLEAVE_ASSERT(cond, ...)                                                                         \
  do {                                                                                                   \
    if (!(cond)) [[unlikely]] {                                                                          \
      ::cleave::detail::throw_internal(__FILE__, __LINE__, #cond, ::fmt::format("" __VA_ARGS__));        \
    }                                                                                                    \
  } while (0)

// One generator for vendor status checks: CLEAVE_VENDOR_CHECK(ok_expression, describe_expression, stmt).
// Backends define e.g. CLEAVE_MPI_CHECK(stmt) on top of it so the failing statement text is in the message.
#define CLEAVE_VENDOR_CHECK(library, status, ok, describe, stmt_text)                                    \
  do {                                                                                                   \
    if (!(ok)) [[unlikely]] {                                                                            \
      throw ::cleave::BackendError(::fmt::format("{} error {} ({}) in `{}` at {}:{}", library,           \
                                                 static_cast<long long>(status), describe, stmt_text,     \
                                                 __FILE__, __LINE__));                                   \
    }                                                                                                    \
  } while (0)

// DType (dtype.hpp): each element type's size in bytes and its name ("f32", "bf16", ...), and the name read back.
// One switch per table, over every enumerator (the compiler warns on a missing case); parse_dtype accepts exactly the
// names dtype_name gives, and refuses any other naming the ones it takes.
#include "engine/core/dtype.hpp"

#include "engine/core/error.hpp"

namespace cleave {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU16: return 2;
  }
  CLEAVE_ASSERT(false, "unknown dtype {}", static_cast<int>(dtype));
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU16: return "u16";
  }
  CLEAVE_ASSERT(false, "unknown dtype {}", static_cast<int>(dtype));
}

DType parse_dtype(std::string_view name) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kU16}) {
    if (dtype_name(d) == name) return d;
  }
  CLEAVE_THROW("unknown dtype '{}': expected one of f32, bf16, f16, i32, i64, u16", name);
}

}  // namespace cleave

// Fuzz target: the strict safetensors reader (engine/checkpoint/safetensors.hpp).
//
// The input is a whole file's bytes, given to parse_safetensors (what read_safetensors runs after reading
// the file). Contract (fuzz_contract.hpp): it returns or throws one cleave::Error line; for a file it
// accepts, every tensor's bytes lie in the data section (each is read here, so ASan reports any that do not)
// and the tensors tile the data section exactly.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "engine/checkpoint/safetensors.hpp"
#include "fuzz_contract.hpp"

namespace {
constexpr std::string_view kTarget = "safetensors_fuzz";
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace cleave::checkpoint;
  namespace fuzz = cleave::fuzz;
  SafetensorsFile file;
  const auto bytes = std::as_bytes(std::span(data, size));
  if (!fuzz::parses_or_errors(kTarget, [&] { file = parse_safetensors(bytes, "<fuzz>"); })) return 0;
  std::size_t total = 0;
  volatile unsigned sink = 0;  // reads every byte of every tensor (ASan checks the bounds)
  for (const auto& [name, record] : file.tensors) {
    const auto tensor = file.bytes(name);
    fuzz::expect(static_cast<std::int64_t>(tensor.size()) == record.end - record.begin, kTarget,
                 "bytes(name) disagrees with the record's offsets");
    for (std::byte b : tensor) sink = static_cast<unsigned>(b);
    total += tensor.size();
  }
  fuzz::expect(total == file.data.size(), kTarget, "accepted tensors do not tile the data section");
  (void)sink;
  return 0;
}

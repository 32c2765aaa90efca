// Fuzz target: the checkpoint index reader (engine/checkpoint/checkpoint_index.hpp) and what the loaders do
// with an index it accepts (engine/train/checkpoint/checkpoint_reader.hpp: parameter_names, shape_of, logical).
//
// The input is index.json text. It is parsed in memory; when it parses it is written, next to a fixed set of
// real checkpoint files (tests/fuzz/data/checkpoint/, copied into a private temporary directory once), as
// that directory's index.json, and every tensor it names is assembled from the files. The seeds are the
// index.json of those files, so mutations keep valid checksums and reach the resharding code. Contract
// (fuzz_contract.hpp): each step returns or throws one cleave::Error line; nothing is allocated beyond what
// the files hold (libFuzzer's -malloc_limit_mb turns a larger allocation into a crash).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "engine/checkpoint/checkpoint_index.hpp"
#include "engine/train/checkpoint/checkpoint_reader.hpp"
#include "fuzz_contract.hpp"

#ifndef CLEAVE_FUZZ_DATA_DIR
#error "CLEAVE_FUZZ_DATA_DIR must name tests/fuzz/data (set by tests/fuzz/CMakeLists.txt)"
#endif

namespace {

namespace fs = std::filesystem;
constexpr std::string_view kTarget = "checkpoint_index_fuzz";

// A private copy of the checkpoint files (the target rewrites index.json there for every input).
class Workspace {
 public:
  Workspace() {
    const fs::path base = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    dir_ = base / ("cleave_fuzz_index_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const fs::path source = fs::path(CLEAVE_FUZZ_DATA_DIR) / "checkpoint";
    for (const auto& entry : fs::directory_iterator(source)) {
      if (entry.path().extension() == ".safetensors") fs::copy_file(entry.path(), dir_ / entry.path().filename());
    }
  }
  ~Workspace() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace cleave;
  static const Workspace workspace;  // one per fuzzing process, removed at exit
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (!fuzz::parses_or_errors(kTarget, [&] { (void)checkpoint::parse_checkpoint_index(text, "<fuzz>"); })) return 0;

  std::ofstream(workspace.dir() / "index.json", std::ios::binary | std::ios::trunc)
      .write(text.data(), static_cast<std::streamsize>(text.size()));
  fuzz::parses_or_errors(kTarget, [&] {
    train::CheckpointReader reader(workspace.dir().string());
    for (const std::string& name : reader.parameter_names()) (void)reader.shape_of(name);
    for (const auto& [name, tensor] : reader.index().at("tensors").items()) {
      fuzz::parses_or_errors(kTarget, [&, name = name] { (void)reader.logical(name); });
    }
  });
  return 0;
}

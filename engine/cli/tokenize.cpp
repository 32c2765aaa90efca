// `cleave tokenize TEXT_FILES... --tokenizer tokenizer.json --out DIR [--val-fraction F] [--eot TOKEN]`:
// encodes UTF-8 text files with a Hugging Face byte-level BPE tokenizer (engine/tokenizer) into llm.c token
// shards, DIR/train.bin and (with --val-fraction) DIR/val.bin, which `data.type "tokens"` reads.
//
// Invariants: the ids are the `tokenizers` package's for encode(file text, add_special_tokens=False), file
// by file, concatenated in the order given (each file preceded by --eot's id when given, as llm.c starts each
// document with <|endoftext|>); the validation split is the last F of the tokens. Every check (inputs exist,
// tokenizer supported, ids fit uint16, outputs absent, text valid UTF-8) runs before the first byte is written;
// a shard appears whole or not at all. Encoding runs on one core.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/cli/args.hpp"
#include "engine/cli/commands.hpp"
#include "engine/core/error.hpp"
#include "engine/core/output_path.hpp"
#include "engine/tokenizer/tokenizer_json.hpp"
#include "engine/tokenizer/unicode_classes.hpp"
#include "engine/train/data/token_shard_writer.hpp"

namespace cleave::cli {
namespace {

ArgParser tokenize_args() {
  ArgParser p("tokenize", "cleave tokenize TEXT_FILES... --tokenizer tokenizer.json --out DIR [--val-fraction F] [--eot TOKEN]",
              R"(Encodes UTF-8 text files with a Hugging Face tokenizer.json (byte-level BPE: GPT-2, Llama 3 and tokenizers
trained like them) into llm.c token shards: DIR/train.bin, and DIR/val.bin holding the last F of the tokens.
The ids equal the `tokenizers` package's (encode(text, add_special_tokens=False), one file at a time). Train
on them with data.type "tokens", data.path DIR/train.bin, data.val_path DIR/val.bin and model.vocab_size at
least the tokenizer's vocabulary (printed at the end). Existing shards are never overwritten.)");
  p.positionals("TEXT_FILES...", "text file")
      .text("--tokenizer", "FILE", "a Hugging Face tokenizer.json (required)")
      .text("--out", "DIR", "the directory for train.bin and val.bin (required; created if missing)")
      .number("--val-fraction", "F", "the last F of the tokens go to val.bin (default 0: no val.bin; F < 1)", 0.0)
      .text("--eot", "TOKEN", "an added token written before each file's tokens, e.g. '<|endoftext|>'");
  return p;
}

// A progress bar on stderr: redrawn in place on a terminal (at most 10 times a second, and at the end), else a
// line per 10% reached.
class ProgressBar {
 public:
  explicit ProgressBar(std::uint64_t total) : total_(total), tty_(::isatty(STDERR_FILENO) != 0) {}
  void update(std::uint64_t done, bool last = false) {
    const double seconds = elapsed();
    const int decile = total_ ? static_cast<int>(10 * done / total_) : 10;
    if (tty_ ? (!last && seconds - drawn_ < 0.1) : decile <= decile_) return;
    drawn_ = seconds;
    decile_ = decile;
    const double fraction = total_ ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
    const int filled = static_cast<int>(fraction * 30);
    std::fprintf(stderr, "%stokenize [%s%s] %.1f/%.1f MB %3.0f%% %.1f MB/s%s", tty_ ? "\r" : "",
                 std::string(filled, '#').c_str(), std::string(30 - filled, '.').c_str(), done / 1e6, total_ / 1e6,
                 100 * fraction, seconds > 0 ? done / 1e6 / seconds : 0.0, tty_ && !last ? "" : "\n");
    std::fflush(stderr);
  }
  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::uint64_t total_;
  bool tty_;
  double drawn_ = -1;
  int decile_ = -1;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

std::string read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  CLEAVE_CHECK(file.good(), "tokenize: cannot open text file {}", path);
  std::ostringstream text;
  text << file.rdbuf();
  CLEAVE_CHECK(!file.bad(), "tokenize: read error in text file {}", path);
  return std::move(text).str();
}

// "line 3, column 7" of a byte offset, for the UTF-8 message.
std::string line_and_column(const std::string& text, std::size_t offset) {
  std::size_t line = 1, line_start = 0;
  for (std::size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') ++line, line_start = i + 1;
  }
  return fmt::format("line {}, byte {} of the line", line, offset - line_start + 1);
}

}  // namespace

int run_tokenize(int argc, char** argv) {
  const ArgParser parser = tokenize_args();
  const Args args = parser.parse(argc, argv);
  if (args.help()) {
    std::fputs(parser.help_text().c_str(), stdout);
    return 0;
  }
  const std::vector<std::string>& inputs = args.positionals();
  const std::string tokenizer_path = args.text("--tokenizer");
  const std::string out_dir = args.text("--out");
  const double val_fraction = args.number("--val-fraction");
  const std::string eot = args.text("--eot");
  CLEAVE_CHECK(!inputs.empty(), "tokenize: no TEXT_FILES given (see cleave tokenize --help)");
  CLEAVE_CHECK(!tokenizer_path.empty(), "tokenize: --tokenizer tokenizer.json is required");
  CLEAVE_CHECK(!out_dir.empty(), "tokenize: --out DIR is required");
  CLEAVE_CHECK(val_fraction < 1.0, "tokenize: --val-fraction must be in [0, 1), got {}", val_fraction);

  std::uint64_t total_bytes = 0;
  for (const std::string& input : inputs) {
    std::error_code ec;
    CLEAVE_CHECK(std::filesystem::is_regular_file(input, ec), "tokenize: text file {}: {}", input,
                 std::filesystem::exists(input, ec) ? "not a regular file" : "no such file");
    total_bytes += std::filesystem::file_size(input);
  }
  const std::filesystem::path dir(out_dir);
  const std::string train_path = (dir / "train.bin").string();
  const std::string val_path = (dir / "val.bin").string();
  CLEAVE_CHECK(!std::filesystem::exists(dir) || std::filesystem::is_directory(dir),
               "tokenize: --out {} exists and is not a directory", out_dir);
  check_output_dir("tokenize: --out", out_dir);
  for (const std::string& shard : {train_path, val_path}) {
    CLEAVE_CHECK(!std::filesystem::exists(shard), "tokenize: {} already exists; nothing was written (remove it or "
                 "choose another --out)", shard);
  }

  tokenizer::Tokenizer tok = tokenizer::read_tokenizer_json(tokenizer_path);
  CLEAVE_CHECK(tok.vocab_size() <= 65536,
               "tokenize: {} has a vocabulary of {} tokens; llm.c shards store uint16 ids, so at most 65536 fit",
               tok.source(), tok.vocab_size());
  std::optional<std::int32_t> eot_id;
  if (!eot.empty()) {
    eot_id = tok.added_token_id(eot);
    CLEAVE_CHECK(eot_id.has_value(), "tokenize: --eot '{}' is not an added token of {}", eot, tok.source());
  }
  std::fprintf(stderr, "tokenize: %s (%s), %zu file%s, %.1f MB\n", tokenizer_path.c_str(), tok.describe().c_str(),
               inputs.size(), inputs.size() == 1 ? "" : "s", total_bytes / 1e6);

  std::vector<std::uint16_t> tokens;
  std::vector<std::int32_t> ids;
  ProgressBar bar(total_bytes);
  std::uint64_t done = 0;
  for (const std::string& input : inputs) {
    const std::string text = read_file(input);
    const std::size_t bad = tokenizer::first_invalid_utf8(text);
    CLEAVE_CHECK(bad == text.size(), "tokenize: text file {} is not valid UTF-8 at byte {} ({}: 0x{:02x}); nothing "
                 "was written", input, bad, line_and_column(text, bad), static_cast<unsigned char>(text[bad]));
    ids.clear();
    if (eot_id) ids.push_back(*eot_id);
    tok.encode(text, ids, [&](std::size_t bytes) { bar.update(done + bytes); });
    done += text.size();
    tokens.insert(tokens.end(), ids.begin(), ids.end());  // every id < vocab_size <= 65536
  }
  bar.update(done, true);
  const double seconds = bar.elapsed();

  const auto n = static_cast<std::int64_t>(tokens.size());
  const auto held_out = static_cast<std::int64_t>(std::floor(static_cast<double>(n) * val_fraction));
  CLEAVE_CHECK(val_fraction == 0.0 || held_out > 0,
               "tokenize: --val-fraction {} of {} tokens is less than one token; nothing was written", val_fraction, n);
  CLEAVE_CHECK(n - held_out > 0, "tokenize: the text files hold no tokens; nothing was written");
  std::filesystem::create_directories(dir);
  const std::span<const std::uint16_t> all(tokens);
  train::write_llmc_shard(train_path, all.first(static_cast<std::size_t>(n - held_out)));
  if (held_out > 0) train::write_llmc_shard(val_path, all.last(static_cast<std::size_t>(held_out)));
  std::printf("tokenize: %.1f MB -> %lld tokens in %.3f s (%.1f MB/s): %s %lld tokens", total_bytes / 1e6,
              static_cast<long long>(n), seconds, seconds > 0 ? total_bytes / 1e6 / seconds : 0.0, train_path.c_str(),
              static_cast<long long>(n - held_out));
  if (held_out > 0) std::printf(", %s %lld tokens", val_path.c_str(), static_cast<long long>(held_out));
  std::printf("\ntokenize: train with data.type \"tokens\" and model.vocab_size >= %d\n", tok.vocab_size());
  return 0;
}

}  // namespace cleave::cli

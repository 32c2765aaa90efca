// `cleave tokenize TEXT_FILES... --tokenizer tokenizer.json --out DIR [--val-fraction F] [--eot TOKEN]
// [--bos-eos auto|none] [--bits auto|16|32] [--shard-tokens N] [--doc-separator STR | --jsonl KEY]`: encodes UTF-8
// text files with a Hugging Face tokenizer.json (engine/tokenizer: byte-level or SentencePiece-style BPE) into
// llm.c token shards, which `data.type "tokens"` reads, and DIR/manifest.json listing them.
//
// Invariants: each file is one document, or with --doc-separator STR each non-empty piece between occurrences
// of STR (STR dropped), or with --jsonl KEY the string at KEY of each non-blank line's JSON object; a document's
// ids are the `tokenizers` package's for encode(document text, add_special_tokens=False), preceded by --eot's id
// when given and surrounded by the BOS/EOS the model's
// tokenizer config gives (document_template.hpp) unless --bos-eos none; documents are concatenated in the order
// given; the validation split is the last F of the tokens. Shards hold uint16 ids when the vocabulary fits
// (≤ 65,536 ids), else uint32 (llm.c's Llama 3 header). Every check (inputs exist, tokenizer supported, outputs
// absent, text valid UTF-8, JSONL lines objects with a string at KEY) runs before the first byte is written; a shard appears whole or not at all, and the
// manifest last. Encoding runs on one core.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/cli/args.hpp"
#include "engine/cli/commands.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/core/output_path.hpp"
#include "engine/tokenizer/document_template.hpp"
#include "engine/tokenizer/tokenizer_json.hpp"
#include "engine/tokenizer/unicode_classes.hpp"
#include "engine/train/data/token_manifest.hpp"
#include "engine/train/data/token_shard_writer.hpp"

namespace cleave::cli {
namespace {

ArgParser tokenize_args() {
  ArgParser p("tokenize",
              "cleave tokenize TEXT_FILES... --tokenizer tokenizer.json --out DIR [--val-fraction F] [--eot TOKEN] "
              "[--bos-eos auto|none] [--bits auto|16|32] [--shard-tokens N] [--doc-separator STR | --jsonl KEY]",
              R"(Encodes UTF-8 text files with a Hugging Face tokenizer.json (byte-level BPE: GPT-2, Llama 3; SentencePiece-style
BPE: Llama 2, Mistral, TinyLlama, Gemma) into llm.c token shards: DIR/train.bin, and DIR/val.bin holding the
last F of the tokens (with --shard-tokens N: DIR/train_00000.bin, ... of N tokens each), and DIR/manifest.json
listing them. Each file is one document (or, with --doc-separator STR, each piece between STRs; with
--jsonl KEY, the string at KEY of each line's JSON object); a document's ids equal the `tokenizers` package's
(encode(text, add_special_tokens=False)), with the BOS/EOS the model's tokenizer config puts around it. Train on
them with data.type "tokens", data.path DIR/train.bin (or data.paths ["DIR/train_*.bin"]) and
model.vocab_size at least the tokenizer's vocabulary (printed at the end). Existing shards are never
overwritten.)");
  p.positionals("TEXT_FILES...", "text file")
      .text("--tokenizer", "FILE", "a Hugging Face tokenizer.json (required); tokenizer_config.json beside it is read")
      .text("--out", "DIR", "the directory for the shards and manifest.json (required; created if missing)")
      .number("--val-fraction", "F", "the last F of the tokens go to val.bin (default 0: no val.bin; F < 1)", 0.0)
      .text("--eot", "TOKEN", "an added token written before each document's tokens, e.g. '<|endoftext|>'")
      .text("--bos-eos", "auto|none",
            "auto: the BOS/EOS tokenizer_config.json's add_bos_token/add_eos_token or the post_processor template "
            "puts around each document; none: no template tokens", "auto")
      .text("--bits", "auto|16|32", "id width in the shards; auto: 16 when the vocabulary has at most 65,536 ids, "
            "else 32", "auto")
      .count("--shard-tokens", "N", "at most N tokens per shard (default: one train and one val shard)", std::nullopt)
      .text("--doc-separator", "STR",
            "documents within a file: the pieces between occurrences of STR (dropped; empty pieces skipped); "
            "\\n, \\t and \\\\ in STR are a newline, a tab and a backslash, e.g. '\\n\\n' for blank lines")
      .text("--jsonl", "KEY", "each non-blank line of a file is a JSON object whose string at KEY is a document "
            "(e.g. text)");
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

// --doc-separator's value with \n, \t, \\ turned into the characters.
std::string unescape_separator(const std::string& arg) {
  std::string out;
  for (std::size_t i = 0; i < arg.size(); ++i) {
    if (arg[i] == '\\' && i + 1 < arg.size() && (arg[i + 1] == 'n' || arg[i + 1] == 't' || arg[i + 1] == '\\')) {
      out.push_back(arg[i + 1] == 'n' ? '\n' : arg[i + 1] == 't' ? '\t' : '\\');
      ++i;
    } else {
      out.push_back(arg[i]);
    }
  }
  return out;
}

// The documents of one file: views into `text`, or (JSONL) into `owned`. `ends[i]`: the byte offset in `text`
// where document i ends, for the progress bar.
struct Documents {
  std::vector<std::string_view> texts;
  std::vector<std::size_t> ends;
  std::vector<std::string> owned;
};

Documents split_documents(const std::string& text, const std::string& path, const std::string& separator,
                          const std::string& jsonl_key) {
  Documents docs;
  if (!jsonl_key.empty()) {
    std::size_t line_number = 0;
    for (std::size_t pos = 0; pos < text.size();) {
      const std::size_t newline = text.find('\n', pos);
      const std::size_t end = newline == std::string::npos ? text.size() : newline;
      const std::string_view line(text.data() + pos, end - pos);
      ++line_number;
      pos = newline == std::string::npos ? text.size() : newline + 1;
      if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      nlohmann::json object;
      try {
        object = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        throw InputError(fmt::format("tokenize: text file {} line {} is not JSON ({}); --jsonl {} reads one JSON "
                                     "object per line; nothing was written", path, line_number, e.what(), jsonl_key));
      }
      const auto value = object.is_object() ? object.find(jsonl_key) : object.end();
      CLEAVE_CHECK_INPUT(object.is_object() && value != object.end() && value->is_string(),
                   "tokenize: text file {} line {}: {}; --jsonl {} needs a JSON object with a string at \"{}\" on every "
                   "non-blank line (or choose the key with --jsonl KEY); nothing was written", path, line_number,
                   !object.is_object() ? "not a JSON object"
                   : value == object.end() ? fmt::format("no key \"{}\"", jsonl_key)
                                           : fmt::format("\"{}\" is not a string", jsonl_key),
                   jsonl_key, jsonl_key);
      docs.owned.push_back(value->get<std::string>());
      docs.ends.push_back(end);
    }
    for (const std::string& d : docs.owned) docs.texts.emplace_back(d);
    return docs;
  }
  if (separator.empty()) {
    docs.texts.emplace_back(text);
    docs.ends.push_back(text.size());
    return docs;
  }
  for (std::size_t pos = 0; pos <= text.size();) {
    const std::size_t hit = text.find(separator, pos);
    const std::size_t end = hit == std::string::npos ? text.size() : hit;
    if (end > pos) {
      docs.texts.emplace_back(text.data() + pos, end - pos);
      docs.ends.push_back(end);
    }
    if (hit == std::string::npos) break;
    pos = hit + separator.size();
  }
  return docs;
}

// The command line, read and checked before anything is opened: --bos-eos and --bits as what they mean.
struct TokenizeOptions {
  std::vector<std::string> inputs;
  std::string tokenizer_path;
  std::string out_dir;
  double val_fraction = 0;
  std::string eot;                 // an added token before each document; empty: none
  bool bos_eos = true;             // --bos-eos auto: the tokenizer config's template around each document
  std::optional<int> bits;         // --bits 16 or 32; empty: auto, from the vocabulary
  std::int64_t shard_tokens = 0;   // 0: one train and one val shard
  std::string separator;           // --doc-separator, unescaped; empty: whole files (or JSONL)
  std::string jsonl_key;           // --jsonl KEY; empty: not JSONL
};

TokenizeOptions tokenize_options(const Args& args) {
  TokenizeOptions o;
  o.inputs = args.positionals();
  o.tokenizer_path = args.text("--tokenizer");
  o.out_dir = args.text("--out");
  o.val_fraction = args.number("--val-fraction");
  o.eot = args.text("--eot");
  const std::string bos_eos = args.text("--bos-eos");
  const std::string bits = args.text("--bits");
  o.shard_tokens = args.given("--shard-tokens") ? args.count("--shard-tokens") : 0;
  o.separator = unescape_separator(args.text("--doc-separator"));
  o.jsonl_key = args.text("--jsonl");
  CLEAVE_CHECK_INPUT(!(args.given("--doc-separator") && args.given("--jsonl")),
               "tokenize: --doc-separator and --jsonl both given; a JSONL line is already one document (give one)");
  CLEAVE_CHECK_INPUT(!args.given("--doc-separator") || !o.separator.empty(),
               "tokenize: --doc-separator is empty; give the string between documents, e.g. '\\n\\n'");
  CLEAVE_CHECK_INPUT(!args.given("--jsonl") || !o.jsonl_key.empty(), "tokenize: --jsonl needs a KEY, e.g. --jsonl text");
  CLEAVE_CHECK_INPUT(!o.inputs.empty(), "tokenize: no TEXT_FILES given (see cleave tokenize --help)");
  CLEAVE_CHECK_INPUT(!o.tokenizer_path.empty(), "tokenize: --tokenizer tokenizer.json is required");
  CLEAVE_CHECK_INPUT(!o.out_dir.empty(), "tokenize: --out DIR is required");
  CLEAVE_CHECK_INPUT(o.val_fraction < 1.0, "tokenize: --val-fraction must be in [0, 1), got {}", o.val_fraction);
  CLEAVE_CHECK_INPUT(bos_eos == "auto" || bos_eos == "none", "tokenize: --bos-eos is '{}'; expected auto or none", bos_eos);
  CLEAVE_CHECK_INPUT(bits == "auto" || bits == "16" || bits == "32", "tokenize: --bits is '{}'; expected auto, "
               "16 or 32", bits);
  o.bos_eos = bos_eos == "auto";
  if (bits != "auto") o.bits = bits == "16" ? 16 : 32;
  return o;
}

// Every input is a regular file; returns their bytes.
std::uint64_t check_inputs(const std::vector<std::string>& inputs) {
  std::uint64_t total_bytes = 0;
  for (const std::string& input : inputs) {
    std::error_code ec;
    CLEAVE_CHECK_INPUT(std::filesystem::is_regular_file(input, ec), "tokenize: text file {}: {}", input,
                 std::filesystem::exists(input, ec) ? "not a regular file" : "no such file");
    total_bytes += std::filesystem::file_size(input);
  }
  return total_bytes;
}

// --out is a directory (or can be made one) holding no shard of either naming and no manifest.
void check_out_dir(const std::string& out_dir) {
  const std::filesystem::path dir(out_dir);
  CLEAVE_CHECK_INPUT(!std::filesystem::exists(dir) || std::filesystem::is_directory(dir),
               "tokenize: --out {} exists and is not a directory", out_dir);
  check_output_dir("tokenize: --out", out_dir);
  // With --shard-tokens the names are numbered; any existing shard of either naming, or a manifest, is refused.
  for (const auto& entry : std::filesystem::exists(dir) ? std::filesystem::directory_iterator(dir)
                                                        : std::filesystem::directory_iterator()) {
    const std::string name = entry.path().filename().string();
    const bool ours = name == "manifest.json" || ((name.rfind("train", 0) == 0 || name.rfind("val", 0) == 0) &&
                                                  entry.path().extension() == ".bin");
    CLEAVE_CHECK_INPUT(!ours, "tokenize: {} already exists; nothing was written (remove it or choose another --out)",
                 entry.path().string());
  }
}

// Every document's ids in order (--eot, the template's BOS, the text's, its EOS), and how many documents.
struct Encoded {
  std::vector<std::int32_t> ids;
  std::int64_t documents = 0;
  double seconds = 0;
};

Encoded encode_files(const TokenizeOptions& o, tokenizer::Tokenizer& tok, std::optional<std::int32_t> eot_id,
                     const tokenizer::DocumentTemplate& doc, std::uint64_t total_bytes) {
  Encoded out;
  ProgressBar bar(total_bytes);
  std::uint64_t done = 0;
  for (const std::string& input : o.inputs) {
    const std::string text = read_file(input);
    const std::size_t bad = tokenizer::first_invalid_utf8(text);
    CLEAVE_CHECK_INPUT(bad == text.size(), "tokenize: text file {} is not valid UTF-8 at byte {} ({}: 0x{:02x}); nothing "
                 "was written", input, bad, line_and_column(text, bad), static_cast<unsigned char>(text[bad]));
    const Documents docs = split_documents(text, input, o.separator, o.jsonl_key);
    for (std::size_t d = 0; d < docs.texts.size(); ++d) {
      if (eot_id) out.ids.push_back(*eot_id);
      out.ids.insert(out.ids.end(), doc.before.begin(), doc.before.end());
      tok.encode(docs.texts[d], out.ids, [&](std::size_t bytes) {
        bar.update(done + std::min(docs.ends[d], (d > 0 ? docs.ends[d - 1] : 0) + bytes));
      });
      out.ids.insert(out.ids.end(), doc.after.begin(), doc.after.end());
    }
    out.documents += static_cast<std::int64_t>(docs.texts.size());
    done += text.size();
  }
  bar.update(done, true);
  out.seconds = bar.elapsed();
  return out;
}

// `tokens` as shards of split `split` ("train", "val") in `dir`, whole (`shard_tokens` 0) or numbered, each listed in
// `shards`.
void write_split(const std::filesystem::path& dir, std::span<const std::int32_t> tokens, const std::string& split,
                 std::int64_t shard_tokens, int bits, std::vector<train::TokenManifest::Shard>& shards) {
  const std::size_t per = shard_tokens > 0 ? static_cast<std::size_t>(shard_tokens) : tokens.size();
  for (std::size_t begin = 0, index = 0; begin < tokens.size(); begin += per, ++index) {
    const std::string name = shard_tokens > 0 ? fmt::format("{}_{:05d}.bin", split, index) : split + ".bin";
    const auto part = tokens.subspan(begin, std::min(per, tokens.size() - begin));
    train::write_llmc_shard((dir / name).string(), part, bits);
    shards.push_back({name, static_cast<std::int64_t>(part.size())});
  }
}

// The --tokenizer file read; any error reading it is bad input (exit 64), raised before anything is written.
tokenizer::Tokenizer read_tokenizer_input(const std::string& path) {
  try {
    return tokenizer::read_tokenizer_json(path);
  } catch (const InputError&) {
    throw;
  } catch (const Error& e) {
    throw InputError(e.what());
  }
}

// The id of --eot `eot` (none when it is empty): one of the tokenizer's added tokens, else bad input whose fix names
// the first few of them (Llama 3 has 256).
std::optional<std::int32_t> eot_token_id(const tokenizer::Tokenizer& tok, const std::string& eot) {
  if (eot.empty()) return std::nullopt;
  const std::optional<std::int32_t> id = tok.added_token_id(eot);
  if (id) return id;
  std::string names;
  const auto& added = tok.added_tokens();
  for (std::size_t i = 0; i < added.size() && i < 8; ++i) names += fmt::format("{}'{}'", i ? ", " : "", added[i].content);
  if (added.size() > 8) names += fmt::format(", ... ({} in all)", added.size());
  throw InputError(fmt::format("tokenize: --eot '{}' is not an added token of {}; {}", eot, tok.source(),
                               added.empty() ? std::string("it has none (drop --eot)")
                                             : "give one of its added tokens: " + names));
}

}  // namespace

int run_tokenize(int argc, char** argv) {
  const ArgParser parser = tokenize_args();
  const Args args = parser.parse(argc, argv);
  if (parser.print_help_if_asked(args)) return 0;
  const TokenizeOptions o = tokenize_options(args);
  const std::uint64_t total_bytes = check_inputs(o.inputs);
  check_out_dir(o.out_dir);
  const std::filesystem::path dir(o.out_dir);
  const std::string manifest_path = (dir / "manifest.json").string();

  tokenizer::Tokenizer tok = read_tokenizer_input(o.tokenizer_path);
  const int bits = o.bits.value_or(tok.vocab_size() > 65536 ? 32 : 16);
  CLEAVE_CHECK_INPUT(bits == 32 || tok.vocab_size() <= 65536,
               "tokenize: {} has a vocabulary of {} tokens; 16-bit shards hold ids up to 65,535 (use --bits 32 or "
               "--bits auto)", tok.source(), tok.vocab_size());
  const std::optional<std::int32_t> eot_id = eot_token_id(tok, o.eot);
  tokenizer::DocumentTemplate doc;
  if (o.bos_eos) doc = tokenizer::read_document_template(tok, o.tokenizer_path);
  else doc.source = "--bos-eos none: nothing before or after each document";
  const std::string documents_are = !o.jsonl_key.empty() ? fmt::format("the string at \"{}\" of each JSONL line", o.jsonl_key)
                                   : !o.separator.empty() ? "the pieces between --doc-separator strings"
                                                          : "whole files";
  std::fprintf(stderr, "tokenize: %s (%s), %zu file%s, %.1f MB, %d-bit shards\ntokenize: BOS/EOS from %s\n"
               "tokenize: documents are %s\n", o.tokenizer_path.c_str(), tok.describe().c_str(), o.inputs.size(),
               o.inputs.size() == 1 ? "" : "s", total_bytes / 1e6, bits, doc.source.c_str(), documents_are.c_str());

  const Encoded encoded = encode_files(o, tok, eot_id, doc, total_bytes);
  const auto n = static_cast<std::int64_t>(encoded.ids.size());
  const auto held_out = static_cast<std::int64_t>(std::floor(static_cast<double>(n) * o.val_fraction));
  CLEAVE_CHECK_INPUT(o.val_fraction == 0.0 || held_out > 0,
               "tokenize: --val-fraction {} of {} tokens is less than one token; nothing was written", o.val_fraction, n);
  CLEAVE_CHECK_INPUT(n - held_out > 0, "tokenize: the text files hold no tokens; nothing was written");
  std::error_code made;
  std::filesystem::create_directories(dir, made);
  CLEAVE_CHECK_INPUT(!made, "tokenize: --out {}: cannot create the directory ({}); nothing was written (choose another --out)",
               o.out_dir, made.message());
  const std::span<const std::int32_t> all(encoded.ids);
  train::TokenManifest manifest;
  manifest.bits = bits;
  manifest.tokenizer = std::filesystem::absolute(o.tokenizer_path).lexically_normal().string();
  manifest.tokenizer_description = tok.describe();
  manifest.vocab_size = tok.vocab_size();
  manifest.documents = encoded.documents;
  manifest.document_template = doc.source;
  write_split(dir, all.first(static_cast<std::size_t>(n - held_out)), "train", o.shard_tokens, bits, manifest.train);
  if (held_out > 0) write_split(dir, all.last(static_cast<std::size_t>(held_out)), "val", o.shard_tokens, bits, manifest.val);
  train::write_token_manifest(manifest_path, manifest);
  const double seconds = encoded.seconds;
  std::printf("tokenize: %.1f MB -> %lld tokens in %.3f s (%.1f MB/s): %zu train shard%s %lld tokens", total_bytes / 1e6,
              static_cast<long long>(n), seconds, seconds > 0 ? total_bytes / 1e6 / seconds : 0.0, manifest.train.size(),
              manifest.train.size() == 1 ? "" : "s", static_cast<long long>(n - held_out));
  if (held_out > 0) {
    std::printf(", %zu val shard%s %lld tokens", manifest.val.size(), manifest.val.size() == 1 ? "" : "s",
                static_cast<long long>(held_out));
  }
  std::printf(" (%d-bit ids), %lld document%s, %s\ntokenize: train with data.type \"tokens\" and model.vocab_size >= %d\n", bits,
              static_cast<long long>(encoded.documents), encoded.documents == 1 ? "" : "s", manifest_path.c_str(),
              tok.vocab_size());
  return 0;
}

}  // namespace cleave::cli

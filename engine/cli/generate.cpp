// `cleave generate CHECKPOINT --prompt TEXT [--tokens N --temperature T --top-k K --seed S]`: samples from a
// GPT checkpoint (any layout it was saved under) on one CPU rank, byte-level: the prompt's bytes are the
// tokens and sampled tokens are printed as bytes. `--tokenizer tokenizer.json` (engine/tokenizer) encodes the
// prompt and decodes the output instead, as `transformers` does (the prompt after the BOS the tokenizer puts before a
// document, document_template.hpp, unless --bos none; the text decoded without it, the decoder's leading space
// stripped), and then any model.vocab_size that holds the tokenizer's ids will do, below 256 too; without one, a vocabulary larger than 256 is not bytes: the output is the token ids, with a warning
// saying why, and one smaller than 256 is refused. Invariant: the same checkpoint, prompt and options give
// the same text (a seeded 64-bit Mersenne Twister; temperature 0 is greedy). `--logits FILE` also writes the
// model's logits after every prefix of the prompt (JSON), which benchmarks/peers/interop_check.py compares
// with PyTorch's.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>
#include <fstream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/cli/args.hpp"
#include "engine/cli/checkpoint_arg.hpp"
#include "engine/cli/commands.hpp"
#include "engine/cli/runtime_env.hpp"
#include "engine/config/config.hpp"
#include "engine/core/english.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/core/log.hpp"
#include "engine/core/output_path.hpp"
#include "engine/tokenizer/document_template.hpp"
#include "engine/tokenizer/tokenizer_json.hpp"
#include "engine/train/checkpoint/checkpoint_reader.hpp"
#include "engine/train/trainer.hpp"

namespace cleave::cli {
namespace {

// The most tokens one call samples: a count a user can wait for (each token is a forward pass, nothing is printed
// until the last), where a typo such as --tokens 2000000000 would run for days before printing a byte.
constexpr std::int64_t kMaxTokens = 65536;

ArgParser generate_args() {
  ArgParser p("generate", "cleave generate CHECKPOINT --prompt TEXT [--tokens N] [--temperature T] [--top-k K] [--seed S] [--tokenizer FILE [--bos auto|none]]",
              R"(Samples N tokens (default 200) from a gpt, llama or moe checkpoint (a step_NNNNNNN directory or a
checkpoint.dir holding them) on one CPU rank and prints the prompt and the continuation. With --tokenizer the
prompt is encoded (after the BOS the tokenizer puts before each document, as transformers encodes it) and the
output decoded by that tokenizer.json, and model.vocab_size must be at least its vocabulary (below 256 too).
Without it the prompt's bytes are the tokens (model.vocab_size >= 256): a vocabulary of 256 is printed as bytes,
a larger one as token ids (space-separated, prompt first).)");
  p.positional("CHECKPOINT", "checkpoint")
      .text("--prompt", "TEXT", "the context (bytes are tokens, or --tokenizer's ids; the model's context of them is\n"
              "seen: model.max_seq_len tokens for rotary positions, model.seq_len for learned ones)")
      .count("--tokens", "N",
             "tokens to sample (at most 65536: each is a forward pass over the model's context, and the\n"
             "text is printed when all are sampled; continue with the output as --prompt)",
             200, 0, kMaxTokens)
      .number("--temperature", "T", "softmax temperature (default 0.8; 0 = greedy)", 0.8)
      .count("--top-k", "K", "sample among the K most likely tokens (default 0 = all)", 0, 0)
      .count("--seed", "S", "sampling seed", 1, 0, std::numeric_limits<std::int64_t>::max())
      .text("--logits", "FILE",
            "also write {\"tokens\": [...], \"logits\": [[V values] after each prefix]} of the prompt\n"
            "(JSON; refuses to overwrite FILE)")
      .text("--tokenizer", "FILE",
            "a Hugging Face tokenizer.json (byte-level or SentencePiece-style BPE) that encodes the\n"
            "prompt and decodes the output; model.vocab_size must be at least its vocabulary")
      .text("--bos", "auto|none",
            "with --tokenizer: auto puts the BOS that tokenizer_config.json or the post_processor puts\n"
            "before each document (as cleave tokenize and transformers do) before the prompt; none: the\n"
            "prompt alone",
            "auto");
  return p;
}

// Samples an index from logits with temperature and top-k.
int sample(std::vector<float> logits, double temperature, int top_k, std::mt19937_64& rng) {
  if (temperature <= 0) return static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  std::vector<int> order(logits.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  const std::size_t keep = top_k > 0 ? std::min<std::size_t>(static_cast<std::size_t>(top_k), order.size()) : order.size();
  std::vector<double> weights(keep);
  const double top = logits[order[0]];
  double total = 0;
  for (std::size_t i = 0; i < keep; ++i) total += weights[i] = std::exp((logits[order[i]] - top) / temperature);
  double u = std::uniform_real_distribution<double>(0.0, total)(rng);
  for (std::size_t i = 0; i < keep; ++i) {
    if ((u -= weights[i]) <= 0) return order[i];
  }
  return order[keep - 1];
}

// The model section generate builds: a rotary-position model (llama, moe) serves up to model.max_seq_len (the
// source's max_position_embeddings) whatever seq_len it was fine-tuned at, as its Hugging Face export does; a
// learned position table (gpt) has seq_len rows, so its context stays seq_len.
nlohmann::json serving_model(nlohmann::json model) {
  const std::int64_t max = model.value("max_seq_len", std::int64_t{0});
  if (model.value("type", std::string("gpt")) != "gpt" && max > model.value("seq_len", std::int64_t{0})) {
    model["seq_len"] = max;
  }
  return model;
}

// The run config of checkpoint `dir`: its model (checked by the strict config reader before anything reads a key of
// it), its optimizer type and step, synthetic data. It must be a language model whose vocabulary holds every id of
// `tok` (bad input otherwise: the tokenizer given does not fit), or without one every byte (at least 256 ids).
config::RunConfig checkpoint_config(const std::string& dir, const std::optional<tokenizer::Tokenizer>& tok) {
  // index.json is checked by CheckpointReader (step, optimizer.type, model an object).
  const nlohmann::json index = train::CheckpointReader(dir).index();
  const nlohmann::json run = {
      {"model", serving_model(index.at("model"))},
      {"optimizer", index.at("optimizer").at("type") == "none"  // weights only (cleave import)
                        ? nlohmann::json::object()
                        : nlohmann::json{{"type", index.at("optimizer").at("type")}}},
      {"train", {{"steps", std::max<std::int64_t>(1, index.at("step").get<std::int64_t>())}, {"eval_batches", 0}}},
      {"data", {{"type", "synthetic"}}}};
  const config::RunConfig config = config::parse_config(run.dump(), "checkpoint " + dir);
  const bool language = partition::is_language_model(config.model.type);
  CLEAVE_CHECK_INPUT(language, "generate: checkpoint {} holds {} model; generation needs a language model (gpt, llama or "
               "moe)", dir, with_article(fmt::format("{}", config.model.type)));
  const std::int64_t vocab = config::token_vocab_size(config.model);
  if (tok) {
    CLEAVE_CHECK_INPUT(tok->vocab_size() <= vocab,
                       "generate: --tokenizer: {} has {} tokens but checkpoint {} has model.vocab_size {}: the "
                       "tokenizer's ids {}..{} would not fit the model; give the tokenizer the model was trained "
                       "with (at most {} tokens)",
                       tok->source(), tok->vocab_size(), dir, vocab, vocab, tok->vocab_size() - 1, vocab);
  } else {
    CLEAVE_CHECK_INPUT(vocab >= 256,
                 "generate: checkpoint {} holds {} model with vocab_size {}; generation needs a language model "
                 "(gpt, llama or moe) with vocab_size >= 256 to feed the prompt's bytes, or --tokenizer FILE whose "
                 "vocabulary fits the model's",
                 dir, with_article(fmt::format("{}", config.model.type)), vocab);
  }
  return config;
}

// The tokenizer.json of the Hugging Face directory the checkpoint's weights came from (index.json "source": an
// import, or a run started by --init-from), when that directory still has one; "" otherwise.
std::string source_tokenizer(const std::string& dir) {
  const nlohmann::json source = train::CheckpointReader(dir).index().value("source", nlohmann::json());
  if (!source.is_object() || !source.contains("path") || !source.at("path").is_string()) return "";
  const std::filesystem::path file = std::filesystem::path(source.at("path").get<std::string>()) / "tokenizer.json";
  return std::filesystem::is_regular_file(file) ? file.string() : "";
}

// The prompt's tokens (after the `prefix` BOS tokens) against the model, before the model is built: bad input (exit
// 64) when it encodes to none, or when --logits (one row per prefix, each within the model's context) is asked of a
// prompt longer than `seq_len`.
void check_prompt(const std::vector<std::int32_t>& context, std::size_t prefix, std::int64_t seq_len, bool logits) {
  CLEAVE_CHECK_INPUT(context.size() > prefix, "generate: the prompt encodes to no tokens; give a --prompt with text");
  CLEAVE_CHECK_INPUT(!logits || context.size() <= static_cast<std::size_t>(seq_len),
                     "generate: --logits needs a prompt of at most {} tokens (the model's context: model.max_seq_len, "
                     "or model.seq_len for learned positions), got {}; shorten the prompt",
                     seq_len, context.size());
}

// --logits: the model's logits after every prefix of the prompt `context` (check_prompt passed), as JSON.
void write_prompt_logits(train::Trainer& trainer, const std::vector<std::int32_t>& context, const std::string& dir,
                         const std::string& logits_path) {
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t n = 1; n <= context.size(); ++n) {
    rows.push_back(trainer.next_token_logits(std::vector<std::int32_t>(context.begin(), context.begin() + n)));
  }
  create_parent_dirs("generate: --logits", logits_path);
  std::ofstream file(logits_path);
  file << nlohmann::json{{"checkpoint", dir}, {"tokens", context}, {"logits", rows}}.dump() << "\n";
  CLEAVE_CHECK(file.good(), "generate: could not write --logits {}", logits_path);
}

// The prompt and continuation as printed: the tokenizer's decode of the ids after the first `skip` (the BOS put
// before the prompt; Tokenizer::decode_printable: an id the tokenizer lacks shown as <|id N|>), the bytes themselves (`bytes`: a vocabulary of 256, where the prompt is printed as given), or the ids
// space-separated.
std::string rendered(const std::vector<std::int32_t>& context, std::size_t skip,
                     const std::optional<tokenizer::Tokenizer>& tok, bool bytes, const std::string& prompt) {
  std::string out;
  if (tok) {
    // Ids the model can sample but the tokenizer lacks (a padded vocabulary) are shown, not dropped; sampled byte
    // tokens may end mid-character: printed as tokenizers' decode gives them (U+FFFD), never as bytes that are not
    // UTF-8 (which a program reading the output as text fails on).
    const std::span<const std::int32_t> ids(context.data() + skip, context.size() - skip);
    return tok->decode_printable(ids, [](std::int32_t id) { return fmt::format("<|id {}|>", id); });
  }
  if (bytes) {
    out = prompt;
    for (std::size_t i = prompt.size(); i < context.size(); ++i) out += static_cast<char>(context[i]);
  } else {
    for (std::size_t i = 0; i < context.size(); ++i) out += fmt::format("{}{}", i ? " " : "", context[i]);
  }
  return out;
}

// --tokenizer FILE read, with the BOS it puts before a document (--bos auto; none: nothing before the prompt).
struct PromptTokenizer {
  std::optional<tokenizer::Tokenizer> tok;  // empty without --tokenizer: the prompt's bytes are the tokens
  std::vector<std::int32_t> prefix;         // the BOS before the prompt
};

// The tokenizer `path` names ("" for none), read before the model loads: a file that does not read is the command
// line's bad input (exit 64).
PromptTokenizer load_prompt_tokenizer(const std::string& path, const std::string& bos) {
  PromptTokenizer out;
  if (path.empty()) return out;
  try {
    out.tok.emplace(tokenizer::read_tokenizer_json(path));
    if (bos == "auto") {
      const tokenizer::DocumentTemplate doc = tokenizer::read_document_template(*out.tok, path);
      out.prefix = doc.before;
      if (!out.prefix.empty()) log::info("generate: the BOS before the prompt, from {} (--bos none: the prompt alone)", doc.source);
    }
  } catch (const InputError&) {
    throw;
  } catch (const Error& e) {
    throw InputError(e.what());  // the file the command line names: bad input (exit 64), before the model loads
  }
  return out;
}

// The prompt's tokens after the prefix: the tokenizer's ids (encoding fills its merge cache), or without one its
// bytes.
std::vector<std::int32_t> encode_prompt(const std::string& prompt, PromptTokenizer& p) {
  std::vector<std::int32_t> context = p.prefix;
  if (p.tok) p.tok->encode(prompt, context);
  else for (unsigned char c : prompt) context.push_back(c);
  return context;
}

// Without a tokenizer, a vocabulary larger than 256 is a tokenizer's whose tokens cleave cannot turn into text, so
// the ids themselves are printed (never a '?' per token that looks like text): said once, naming the tokenizer to
// pass (the weights' source's when checkpoint `dir` names one).
void warn_ids_not_text(const config::RunConfig& config, const std::string& dir) {
  const std::string own = source_tokenizer(dir);
  log::warn("generate: model.vocab_size is {}, not 256: the checkpoint's tokens are not bytes and no --tokenizer "
            "was given to decode them, so the prompt's bytes are fed as token ids 0-255 and the output is the "
            "token ids (prompt and continuation), space-separated; pass --tokenizer {} for text",
            config::token_vocab_size(config.model),
            own.empty() ? std::string("tokenizer.json") : own + " (the weights' source's)");
}

// How to sample: the count, temperature (0: greedy), top-k (0: all) and seed.
struct Sampling {
  std::int64_t tokens = 0;
  double temperature = 0;
  int top_k = 0;
  std::uint64_t seed = 0;
};

// `sampling.tokens` tokens appended to `context`, each sampled from the model's logits over the last `seq_len`
// tokens (the model's context) with a Mersenne Twister seeded once.
void sample_continuation(train::Trainer& trainer, std::vector<std::int32_t>& context, std::int64_t seq_len,
                         const Sampling& sampling) {
  std::mt19937_64 rng(sampling.seed);
  for (std::int64_t t = 0; t < sampling.tokens; ++t) {
    const std::size_t start = context.size() > static_cast<std::size_t>(seq_len) ? context.size() - seq_len : 0;
    const std::vector<std::int32_t> window(context.begin() + static_cast<std::ptrdiff_t>(start), context.end());
    const int next = sample(trainer.next_token_logits(window), sampling.temperature, sampling.top_k, rng);
    context.push_back(next);
  }
}

}  // namespace

int run_generate(int argc, char** argv) {
  const ArgParser parser = generate_args();
  const Args args = parser.parse(argc, argv);
  if (parser.print_help_if_asked(args)) return 0;
  const std::string source = args.positional(0);
  const std::string prompt = args.text("--prompt");
  const Sampling sampling{args.count("--tokens"), args.number("--temperature"), static_cast<int>(args.count("--top-k")),
                          static_cast<std::uint64_t>(args.count("--seed"))};
  const std::string logits_path = args.text("--logits");
  const std::string tokenizer_path = args.text("--tokenizer");
  const std::string bos = args.text("--bos");
  CLEAVE_CHECK_INPUT(!source.empty(), "generate: no CHECKPOINT given (see cleave generate --help)");
  CLEAVE_CHECK_INPUT(!prompt.empty(), "generate: --prompt TEXT is required (a non-empty context)");
  CLEAVE_CHECK_INPUT(bos == "auto" || bos == "none", "generate: --bos is '{}'; expected auto or none", bos);
  // Every output path before any work.
  if (!logits_path.empty()) check_output_file("generate: --logits", logits_path);
  const checkpoint::ReadSource target = checkpoint_read_source(
      "generate", source,
      fmt::format("generate: {} is a Hugging Face model directory, not a Cleave checkpoint; convert it first with "
                  "cleave import {} --out CKPT, then cleave generate CKPT",
                  source, source));
  PromptTokenizer prompt_tokenizer = load_prompt_tokenizer(tokenizer_path, bos);
  const std::optional<tokenizer::Tokenizer>& tok = prompt_tokenizer.tok;
  std::vector<std::string> words{"cleave"};
  words.insert(words.end(), argv, argv + argc);
  return checkpoint::read_newest(target, words, [&] {
    const std::string& dir = target.dir;
    const config::RunConfig config = checkpoint_config(dir, tok);
    const std::int64_t seq_len = config::token_seq_len(config.model);
    std::vector<std::int32_t> context = encode_prompt(prompt, prompt_tokenizer);
    check_prompt(context, prompt_tokenizer.prefix.size(), seq_len, !logits_path.empty());

    CommandRuntime runtime(&argc, &argv);
    CLEAVE_CHECK_INPUT(runtime.world_size() == 1, "generate: runs on one rank (launched with {}); run it without mpirun",
                       runtime.world_size());
    runtime.place_threads();
    comm::World world = runtime.world(config);  // one CPU rank: the config above names no other backend
    train::Trainer trainer(config, *world.comm);
    trainer.load_checkpoint(dir);
    if (!logits_path.empty()) write_prompt_logits(trainer, context, dir, logits_path);
    // A vocabulary of exactly 256 is bytes; a larger one without a tokenizer prints the ids (warn_ids_not_text).
    const bool bytes = !tok && config::token_vocab_size(config.model) == 256;
    if (!bytes && !tok) warn_ids_not_text(config, dir);
    sample_continuation(trainer, context, seq_len, sampling);
    const std::string out = rendered(context, prompt_tokenizer.prefix.size(), tok, bytes, prompt);
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fputc('\n', stdout);
    return 0;
  });
}

}  // namespace cleave::cli

// `cleave import HF_DIR --out CKPT`: a Hugging Face model directory (GPT2LMHeadModel or a Llama-like class:
// config.json plus model.safetensors or shards with model.safetensors.index.json) converted into a weights-only
// Cleave checkpoint (engine/train/checkpoint/weights_only.hpp): CKPT/step_0000000 with index.json and one safetensors
// file under Cleave's names and shapes (engine/hf/hf_layout.hpp). No MPI: it reads and writes files only.
// Invariant: everything is read and checked (names, shapes, every value finite, config.json's settings, the model
// section through the config reader) before anything is written, and an existing or unwritable CKPT is refused
// before anything is read.
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/cli/args.hpp"
#include "engine/cli/commands.hpp"
#include "engine/config/config.hpp"
#include "engine/core/allocator.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/core/log.hpp"
#include "engine/core/output_path.hpp"
#include "engine/hf/hf_import.hpp"
#include "engine/train/checkpoint/finite_weights.hpp"
#include "engine/train/checkpoint/weights_only.hpp"

namespace cleave::cli {
namespace {

ArgParser import_args() {
  ArgParser p("import", "cleave import HF_DIR --out CKPT",
              R"(Converts a Hugging Face model directory (config.json and safetensors weights, one file or shards with
model.safetensors.index.json; GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
Qwen3ForCausalLM, MixtralForCausalLM, Qwen2MoeForCausalLM or Qwen3MoeForCausalLM: docs/models.md) into
a Cleave checkpoint of weights only (CKPT/step_0000000). A Llama-like model's model.seq_len is
min(max_position_embeddings, 1024) (max_seq_len records the maximum; choose another with --set model.seq_len
at train time); a GPT-2's is n_positions. Start training from it, at any layout, with cleave train CONFIG --init-from CKPT (or
--init-from HF_DIR directly); generate and export read it like any checkpoint.)");
  p.positional("HF_DIR", "Hugging Face model directory")
      .text("--out", "CKPT", "the checkpoint directory to write (required; an existing path is refused)");
  return p;
}

// HF_DIR that is not a directory, or Cleave's own output (a run directory or a checkpoint, whose config.json is not a
// Hugging Face one): bad input naming what it is and what reads it instead.
void check_import_source(const std::string& source) {
  namespace fs = std::filesystem;
  std::error_code ec;
  CLEAVE_CHECK_INPUT(fs::is_directory(source, ec), "import: {}: {}", source,
                     fs::exists(source, ec) ? "not a directory (give a Hugging Face model directory)" : "no such directory");
  const fs::path dir(source);
  const bool run_dir = fs::exists(dir / "metrics.jsonl", ec) || fs::is_directory(dir / "checkpoints", ec);
  const bool checkpoint = fs::exists(dir / "index.json", ec) || fs::exists(dir / "latest", ec);
  CLEAVE_CHECK_INPUT(!run_dir && !checkpoint,
                     "import: {} is a Cleave {}, not a Hugging Face model directory: cleave train --init-from {} reads "
                     "it as it is (and cleave export --format hf writes a Hugging Face directory from it)",
                     source, run_dir ? "run directory" : "checkpoint",
                     run_dir ? (dir / "checkpoints").string() : source);
}

}  // namespace

int run_import(int argc, char** argv) {
  const ArgParser parser = import_args();
  const Args args = parser.parse(argc, argv);
  if (parser.print_help_if_asked(args)) return 0;
  const std::string source = args.positional(0);
  const std::string out = args.text("--out");
  CLEAVE_CHECK_INPUT(!source.empty(), "import: no HF_DIR given (see cleave import --help)");
  CLEAVE_CHECK_INPUT(!out.empty(), "import: --out CKPT is required");
  check_output_file("import: --out", out);  // new, in a writable place, before anything is read
  check_import_source(source);
  // HF_DIR's files that do not agree, or a NaN in its weights: bad input (exit 64), before anything is written.
  const hf::HfCheckpoint weights = reading_input([&] { return hf::read_hf_checkpoint(source); });
  for (const std::string& note : weights.config.notes) log::warn("import: {}", note);
  reading_input([&] {
    for (const auto& [name, values] : weights.tensors) train::check_finite_weights("import: " + source, name, values);
  });
  const std::string config_json = (std::filesystem::path(source) / "config.json").string();
  // The model section through the config reader: Cleave's own rules (sizes, limits) and its canonical form.
  const config::RunConfig config =
      config::parse_config(nlohmann::json{{"model", weights.config.model}}.dump(), config_json + " as Cleave's model");
  const nlohmann::json model = nlohmann::json::parse(config::to_json(config)).at("model");
  const std::string architecture(hf::architecture_class(weights.config.dims.architecture));
  const train::WeightsOnlyStats stats = train::write_weights_checkpoint(
      out, model, weights.tensors, weights.shapes,
      hf::hf_source_record(source, weights));
  log::info("import: {} {} ({} tensors from {} file{}) -> {} ({}, weights only: training from it starts a fresh "
            "optimizer at step 0)",
            architecture, source, stats.tensors, weights.files.size(), weights.files.size() == 1 ? "" : "s", stats.path,
            format_bytes(stats.bytes));
  if (model.contains("max_seq_len")) {
    const auto seq = model.at("seq_len").get<std::int64_t>(), max = model.at("max_seq_len").get<std::int64_t>();
    log::info("import: model.seq_len {} (the model serves up to {}, its max_position_embeddings{}); train at "
              "another length with --set model.seq_len=N, N <= {}",
              seq, max, seq < max ? fmt::format("; {} is Cleave's default, min(max, {})", seq, hf::kImportSeqLen) : "",
              max);
  }
  return 0;
}

}  // namespace cleave::cli

// `cleave export CHECKPOINT --out PATH [--format cleave|hf] [--dtype f32|bf16] [--max-shard-size SIZE]`: every
// logical parameter of a checkpoint saved under any layout (tp shards placed, ZeRO-1 and pp splits irrelevant),
// without optimizer state. No MPI: it reads files only.
//
// --format cleave (default): one safetensors file under Cleave's logical parameter names (the names in
// index.json, e.g. "embed.token", "blocks.0.attn.qkv.weight", "final_norm.weight"), with their logical shapes.
// A tied LM head is stored once, as the embedding table. "__metadata__" holds format "cleave-export", the step,
// the dtype and the model section (JSON text).
// --format hf: a Hugging Face model directory (engine/hf/hf_export.hpp: config.json, model.safetensors or
// shards of at most --max-shard-size with model.safetensors.index.json) that transformers' from_pretrained
// loads as GPT2LMHeadModel (gpt) or LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM (llama), carrying
// what the checkpoint's index.json "source" recorded of a Hugging Face origin (hf_export.hpp).
#include <string>
#include <vector>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "engine/checkpoint/safetensors.hpp"
#include "engine/cli/args.hpp"
#include "engine/cli/checkpoint_arg.hpp"
#include "engine/cli/commands.hpp"
#include "engine/core/allocator.hpp"
#include "engine/core/dtype.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/core/log.hpp"
#include "engine/core/output_path.hpp"
#include "engine/hf/hf_export.hpp"
#include "engine/train/checkpoint/checkpoint_reader.hpp"

namespace cleave::cli {
namespace {

ArgParser export_args() {
  ArgParser p("export",
              "cleave export CHECKPOINT --out PATH [--format cleave|hf] [--dtype f32|bf16] [--max-shard-size SIZE]",
              R"(Writes every parameter of CHECKPOINT (a step_NNNNNNN directory, or a checkpoint.dir holding them: its
latest complete one), consolidated from whatever layout it was saved under. --format cleave: one safetensors
file under Cleave's logical parameter names (as in index.json; a tied LM head is the embedding table).
--format hf: a Hugging Face model directory (config.json + safetensors) that transformers' from_pretrained
loads: GPT2LMHeadModel for a gpt model; LlamaForCausalLM, MistralForCausalLM (a sliding window),
Qwen2ForCausalLM (q/k/v biases) or Qwen3ForCausalLM (q/k norms) for a llama one; MixtralForCausalLM,
Qwen3MoeForCausalLM (q/k norms) or Qwen2MoeForCausalLM (a gated shared expert) for a moe one. A model
imported from Hugging Face (cleave import, train --init-from) exports as its source class with the source's
config.json keys (token ids, dropout, ...), generation_config.json and the tokenizer files the source directory
has (docs/checkpoints.md).)");
  p.positional("CHECKPOINT", "checkpoint")
      .text("--out", "PATH", "the file (cleave) or directory (hf) to write (required; an existing one is refused)")
      .text("--format", "F", "cleave (default) or hf", "cleave")
      .text("--dtype", "T", "f32 (default) or bf16 (rounded to nearest even)", "f32")
      .size("--max-shard-size", "SIZE",
            "hf only: split the weights into files of at most SIZE (e.g. 5GB) with\n"
            "model.safetensors.index.json (default: one model.safetensors)");
  return p;
}

int export_hf(train::CheckpointReader& reader, const std::string& out, bool bf16, std::int64_t max_shard_bytes) {
  const auto& model = reader.index().at("model");
  const nlohmann::json source = reader.index().value("source", nlohmann::json());
  const hf::HfExportStats stats = hf::write_hf_checkpoint(
      out, model, [&](const std::string& name) { return reader.logical(name); },
      {bf16, max_shard_bytes, source.is_object() && source.value("format", "") == "huggingface" ? source : nlohmann::json()});
  for (const std::string& note : stats.notes) log::warn("export: {}", note);
  log::info("export: {} tensors of {} -> {} (Hugging Face {}, {} safetensors file{}, config.json{}, "
            "generation_config.json{}{}, {})",
            stats.tensors, reader.dir(), out, stats.architecture, stats.files, stats.files == 1 ? "" : "s",
            source.is_object() ? fmt::format(" from {}'s", source.value("path", "the source")) : "",
            stats.tokenizer_files.empty() ? "" : ", tokenizer files: ",
            fmt::format("{}", fmt::join(stats.tokenizer_files, " ")), format_bytes(stats.bytes));
  return 0;
}

// --format cleave: one safetensors file of every logical parameter (f32, or bf16 rounded to nearest even) with the
// step, the dtype and the model section in its metadata.
int export_cleave(train::CheckpointReader& reader, const std::string& dir, const std::string& out, bool bf16) {
  const auto names = reader.parameter_names();
  CLEAVE_CHECK(!names.empty(), "export: checkpoint {} holds no parameters", dir);
  std::vector<std::vector<float>> f32(names.size());
  std::vector<std::vector<std::uint16_t>> bf16_values(names.size());
  std::vector<checkpoint::TensorToWrite> tensors;
  std::int64_t elements = 0;
  for (std::size_t i = 0; i < names.size(); ++i) {
    f32[i] = reader.logical(names[i]);
    elements += static_cast<std::int64_t>(f32[i].size());
    std::span<const std::byte> bytes = std::as_bytes(std::span<const float>(f32[i]));
    if (bf16) {
      bf16_values[i].reserve(f32[i].size());
      for (float v : f32[i]) bf16_values[i].push_back(float_to_bf16(v));
      bytes = std::as_bytes(std::span<const std::uint16_t>(bf16_values[i]));
    }
    tensors.push_back({names[i], bf16 ? "BF16" : "F32", reader.shape_of(names[i]), bytes});
  }
  const auto& index = reader.index();
  create_parent_dirs("export: --out", out);  // the check before work allowed directories that do not exist yet
  const auto written = checkpoint::write_safetensors(
      out, tensors,
      {{"format", "cleave-export"},
       {"step", std::to_string(index.at("step").get<std::int64_t>())},
       {"dtype", bf16 ? "bf16" : "f32"},
       {"model", index.at("model").dump()}});
  log::info("export: {} parameters ({} elements) of {} -> {} ({})", names.size(), elements, dir, out,
            format_bytes(written.bytes));
  return 0;
}

}  // namespace

int run_export(int argc, char** argv) {
  const ArgParser parser = export_args();
  const Args args = parser.parse(argc, argv);
  if (parser.print_help_if_asked(args)) return 0;
  const std::string source = args.positional(0);
  const std::string out = args.text("--out");
  const std::string dtype = args.text("--dtype");
  const std::string format = args.text("--format");
  CLEAVE_CHECK_INPUT(!source.empty(), "export: no CHECKPOINT given (see cleave export --help)");
  CLEAVE_CHECK_INPUT(!out.empty(), "export: --out {} is required", format == "hf" ? "DIR" : "FILE.safetensors");
  CLEAVE_CHECK_INPUT(dtype == "f32" || dtype == "bf16", "export: --dtype must be f32 or bf16, got '{}'", dtype);
  CLEAVE_CHECK_INPUT(format == "cleave" || format == "hf", "export: --format must be cleave or hf, got '{}'", format);
  const bool hf_format = format == "hf";
  const bool bf16 = dtype == "bf16";
  CLEAVE_CHECK_INPUT(hf_format || !args.given("--max-shard-size"),
               "export: --max-shard-size applies to --format hf (a cleave export is one file)");
  CLEAVE_CHECK_INPUT(args.size("--max-shard-size").value_or(1) > 0,
                     "export: --max-shard-size 0: a shard holds at least one tensor; give a size such as 5GB, or drop "
                     "the option for one model.safetensors");
  check_output_file("export: --out", out);  // a file (cleave) or a directory (hf): new, in a writable place
  const checkpoint::ReadSource target = checkpoint_read_source(
      "export", source,
      fmt::format("export: {} is a Hugging Face model directory already, not a Cleave checkpoint (cleave import {} "
                  "--out CKPT converts it into one)",
                  source, source));
  std::vector<std::string> words{"cleave"};
  words.insert(words.end(), argv, argv + argc);
  return checkpoint::read_newest(target, words, [&] {
    train::CheckpointReader reader(target.dir);
    reader.check_files();  // every file's size and header before a tensor is read
    if (hf_format) return export_hf(reader, out, bf16, args.size("--max-shard-size").value_or(0));
    return export_cleave(reader, target.dir, out, bf16);
  });
}

}  // namespace cleave::cli

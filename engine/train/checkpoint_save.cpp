// save_checkpoint (checkpoint_io.hpp): every rank writes the pieces it owns (checkpoint_pieces.hpp) into one
// safetensors file of the temporary step directory; rank 0 gathers the pieces' placements and the files'
// sizes and checksums, writes index.json, commits the directory and prunes (engine/checkpoint/).
//
// index.json: {"format": "cleave-checkpoint", "version", "step", "consumed_samples", "next_lr", "seed", "rng",
//   "model": <the config's model section>, "config": <the whole resolved config, compared on resume>, "layout": {tp, pp, dp, virtual_pipeline_stages, zero_stage,
//   world_size, schedule}, "optimizer": {"type", "steps_done"},
//   "files": {file: {"bytes", "checksum"}},
//   "tensors": {logical name: {"kind": "parameter" | "optimizer_state", "shape", "dtype": "F32", "pieces": [{"file", "name", "dim", "parts",
//   "index", "groups", "begin", "end"}]}}}
// A piece holds elements [begin, end) of tp shard `index` of `parts` along `dim` (in `groups` blocks;
// dim -1: the whole tensor), flattened; layers/parallel/shard.hpp places it.
#include <algorithm>
#include <chrono>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "engine/checkpoint/checkpoint_dir.hpp"
#include "engine/checkpoint/checksum.hpp"
#include "engine/checkpoint/safetensors.hpp"
#include "engine/core/error.hpp"
#include "engine/core/log.hpp"
#include "engine/train/checkpoint_io.hpp"
#include "kernels/ops/ops.hpp"
#include "engine/train/checkpoint_pieces.hpp"
#include "engine/train/checkpoint_reader.hpp"
#include "engine/train/collectives.hpp"
#include "engine/core/allocator.hpp"

namespace cleave::train {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// Per-piece checksum chunks (checkpoint_index.hpp): a rank loading part of a piece reads and verifies at most one
// chunk beyond each end of its range; 1 MiB keeps index.json near 20 bytes per MiB saved.
constexpr std::int64_t kChecksumChunkBytes = std::int64_t{1} << 20;

std::vector<std::int64_t> dims_of(const Shape& shape) { return {shape.dims().begin(), shape.dims().end()}; }

// This rank's file and the placement of every piece in it (a JSON text rank 0 gathers).
json write_rank_file(const RankSetup& s, const RankModel& model, StepTail& tail, const std::string& tmp_dir) {
  const std::vector<LocalPiece> pieces = local_pieces(s, model, tail);
  const std::string file = fmt::format("rank_{:05d}.safetensors", s.world.rank());
  std::vector<checkpoint::TensorToWrite> tensors;
  std::vector<Tensor> host_copies;  // device pieces read back (GPU runs), alive until the file is written
  host_copies.reserve(pieces.size());
  json placements = json::array();
  for (const LocalPiece& piece : pieces) {
    if (!piece.owned) continue;
    const Tensor& data = piece.data.device().is_cpu() ? piece.data
                                                      : host_copies.emplace_back(ops::to_host(s.context, piece.data));
    const std::string name = piece.offset == 0 && piece.data.numel() == piece.param->value.numel()
                                 ? piece.tensor
                                 : fmt::format("{}@{}", piece.tensor, piece.offset);
    tensors.push_back({name, "F32", {piece.data.numel()},
                       std::as_bytes(std::span<const float>(data.data<float>(),
                                                            static_cast<std::size_t>(data.numel())))});
    const layers::ShardSpec& spec = piece.param->shard;
    placements.push_back({{"tensor", piece.tensor},
                          {"kind", piece.tensor == piece.param->name ? "parameter" : "optimizer_state"},
                          {"shape", dims_of(logical_shape(*piece.param))},
                          {"file", file},
                          {"name", name},
                          {"dim", spec.dim},
                          {"parts", spec.dim < 0 ? 1 : spec.parts},
                          {"index", spec.dim < 0 ? 0 : spec.index},
                          {"groups", spec.dim < 0 ? 1 : spec.groups},
                          {"begin", piece.offset},
                          {"end", piece.offset + piece.data.numel()}});
  }
  json out = {{"pieces", placements}};
  if (tensors.empty()) return out;
  const checkpoint::WrittenFile written =
      checkpoint::write_safetensors((fs::path(tmp_dir) / file).string(), tensors,
                                    {{"format", "cleave-checkpoint"}, {"rank", std::to_string(s.world.rank())}},
                                    kChecksumChunkBytes);
  for (std::size_t i = 0; i < placements.size(); ++i) {  // one placement per tensor written, in order
    json chunks = json::array();
    for (std::uint64_t hash : written.chunk_checksums[i]) chunks.push_back(fmt::format("{:016x}", hash));
    out["pieces"][i]["chunk_bytes"] = kChecksumChunkBytes;
    out["pieces"][i]["chunks"] = std::move(chunks);
  }
  out["file"] = {{"name", file},
                 {"bytes", written.bytes},
                 {"checksum", checkpoint::checksum_text(written.checksum)},
                 {"header_checksum", checkpoint::checksum_text(written.header_checksum)}};
  return out;
}

// Every random draw of a run is a counter-based function of (train.seed, stream, step, sample index) (data
// sources; initialisation uses (seed, parameter name) and is not drawn again), so the seed and the stream
// positions are the whole RNG state. checkpoint_load.cpp checks a resumed run continues them.
json rng_state_json(const RankSetup& s, std::int64_t steps_done) {
  return {{"scheme", "counter"},
          {"seed", s.config.train.seed},
          {"train_stream", {{"next_step", steps_done}, {"global_batch_size", s.batch.global_batch_size}}},
          {"eval_stream", "stateless: eval batch k is the same at every evaluation"}};
}

json layout_json(const RankSetup& s) {
  const auto& p = s.config.parallel;
  return {{"tensor_model_parallel_size", s.grid.tp_size()},
          {"pipeline_model_parallel_size", s.grid.pp_size()},
          {"data_parallel_size", s.grid.dp_size()},
          {"virtual_pipeline_stages", p.virtual_pipeline_stages},
          {"zero_stage", s.config.optimizer.zero_stage},
          {"world_size", s.world.size()},
          {"schedule", s.plan.schedule.name}};
}

}  // namespace

CheckpointSaveStats save_checkpoint(RankSetup& s, RankModel& model, StepTail& tail, const std::string& root,
                                    std::int64_t steps_done) {
  const auto start = std::chrono::steady_clock::now();
  std::string tmp_dir;
  std::string error;
  if (s.reports()) {
    try {
      tmp_dir = checkpoint::begin_step_dir(root, steps_done);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  throw_if_any_rank_failed(s.world, error);  // also orders every write after the directory exists
  tmp_dir = (fs::path(root) / (".tmp-" + checkpoint::step_dir_name(steps_done))).string();
  json mine;
  try {
    mine = write_rank_file(s, model, tail, tmp_dir);
  } catch (const std::exception& e) {
    error = e.what();
  }
  throw_if_any_rank_failed(s.world, error);
  const std::string text = mine.dump();
  const auto gathered = all_gather_values<char>(s.world, std::span<const char>(text.data(), text.size()));

  CheckpointSaveStats stats;
  if (s.reports()) {
    try {
      json index = {{"format", "cleave-checkpoint"},
                    {"version", kCheckpointFormatVersion},
                    {"step", steps_done},
                    {"consumed_samples", steps_done * s.batch.global_batch_size},
                    {"next_lr", tail.lr_at(steps_done)},
                    {"seed", s.config.train.seed},
                    {"rng", rng_state_json(s, steps_done)},
                    {"model", json::parse(config::to_json(s.config)).at("model")},
                    {"config", json::parse(config::to_json(s.config))},
                    {"layout", layout_json(s)},
                    {"optimizer",
                     {{"type", std::string(enum_name(s.config.optimizer.type))},
                      {"steps_done", tail.optimizer_steps_done()}}}};
      json files = json::object();
      json tensors = json::object();
      for (const auto& bytes : gathered) {
        const json rank = json::parse(std::string(bytes.begin(), bytes.end()));
        if (rank.contains("file")) {
          files[rank["file"]["name"].get<std::string>()] = {{"bytes", rank["file"]["bytes"]},
                                                            {"checksum", rank["file"]["checksum"]},
                                                            {"header_checksum", rank["file"]["header_checksum"]}};
          stats.bytes += rank["file"]["bytes"].get<std::int64_t>();
          ++stats.files;
        }
        for (const json& piece : rank["pieces"]) {
          json& entry = tensors[piece["tensor"].get<std::string>()];
          if (entry.is_null()) {
            entry = {{"kind", piece["kind"]}, {"shape", piece["shape"]}, {"dtype", "F32"}, {"pieces", json::array()}};
          }
          json placed = piece;
          placed.erase("tensor");
          placed.erase("shape");
          placed.erase("kind");
          entry["pieces"].push_back(placed);
        }
      }
      index["files"] = files;
      index["tensors"] = tensors;
      const std::string index_text = index.dump(1) + "\n";
      checkpoint::write_file_durable((fs::path(tmp_dir) / "index.json").string(), index_text);
      stats.bytes += static_cast<std::int64_t>(index_text.size());
      ++stats.files;
      stats.path = checkpoint::commit_step_dir(root, steps_done);
      checkpoint::prune_step_dirs(root, static_cast<int>(s.config.checkpoint.keep_last));
      stats.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      log::info("checkpoint: step {} saved to {} ({} in {} files, {:.1f} ms, {:.1f} MB/s)", steps_done, stats.path,
                format_bytes(stats.bytes), stats.files, stats.ms,
                static_cast<double>(stats.bytes) / 1e6 / std::max(stats.ms * 1e-3, 1e-9));
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  throw_if_any_rank_failed(s.world, error);  // nobody continues before the commit (or its failure) is known
  const std::vector<double> shared =
      reduce_doubles(s.world, {static_cast<double>(stats.bytes), static_cast<double>(stats.files), stats.ms},
                     comm::ReduceOp::kSum);
  stats.bytes = static_cast<std::int64_t>(shared[0]);
  stats.files = static_cast<int>(shared[1]);
  stats.ms = shared[2];
  stats.path = (fs::path(root) / checkpoint::step_dir_name(steps_done)).string();
  return stats;
}

}  // namespace cleave::train

// CheckpointSave and save_checkpoint (checkpoint_io.hpp): every rank writes the pieces it owns
// (checkpoint_pieces.hpp) into one safetensors file of the temporary step directory (from a host snapshot on a
// background thread, or inline from the live tensors); at the commit rank 0 gathers the pieces' placements and
// the files' sizes and checksums, writes index.json, commits the directory and prunes (engine/checkpoint/).
//
// index.json: {"format": "cleave-checkpoint", "version", "index_checksum" (checkpoint_index.hpp), "step", "consumed_samples", "next_lr", "seed", "rng",
//   "model": <the config's model section>, "config": <the whole resolved config, compared on resume>,
//   "layout": {tp, pp, dp, virtual_pipeline_stages, zero_stage, world_size, schedule},
//   "optimizer": {"type", "steps_done"}, "files": {file: {"bytes", "checksum", "header_checksum"}},
//   "tensors": {logical name: {"kind": "parameter" | "optimizer_state", "shape", "dtype": "F32", "pieces": [{"file",
//   "name", "dim", "parts", "index", "groups", "begin", "end", "chunk_bytes", "chunks"}]}}}
// A piece holds elements [begin, end) of tp shard `index` of `parts` along `dim` (in `groups` blocks;
// dim -1: the whole tensor), flattened; layers/parallel/shard.hpp places it. An ep × tp expert tensor (ShardSpec::
// ep_parts) is written as its range of the tp shard (its ep rank's experts), so the pieces of the ep ranks tile it.
// chunks: fnv1a64 of each chunk_bytes of its bytes, so a loading rank verifies just the ranges it reads
// (checkpoint_reader.hpp).
#include <algorithm>
#include <chrono>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "engine/checkpoint/checkpoint_dir.hpp"
#include "engine/checkpoint/checkpoint_index.hpp"
#include "engine/checkpoint/checksum.hpp"
#include "engine/checkpoint/safetensors.hpp"
#include "engine/core/allocator.hpp"
#include "engine/core/english.hpp"
#include "engine/core/error.hpp"
#include "engine/core/log.hpp"
#include "engine/train/checkpoint/checkpoint_io.hpp"
#include "engine/train/checkpoint/checkpoint_pieces.hpp"
#include "engine/train/checkpoint/checkpoint_reader.hpp"
#include "engine/train/collectives.hpp"
#include "kernels/ops/ops.hpp"
#include "layers/parallel/shard.hpp"

namespace cleave::train {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// Per-piece checksum chunks (checkpoint_index.hpp): a rank loading part of a piece reads and verifies at most one
// chunk beyond each end of its range; 1 MiB keeps index.json near 20 bytes per MiB saved.
constexpr std::int64_t kChecksumChunkBytes = std::int64_t{1} << 20;

std::vector<std::int64_t> dims_of(const Shape& shape) { return {shape.dims().begin(), shape.dims().end()}; }

}  // namespace

// One rank's part of a save: the bytes of the pieces it owns (views of the live tensors, or host copies that
// `copies` / `host_copies` own) with their placements, and what the writer produced.
struct RankSaveJob {
  std::string tmp_dir;
  std::string file;  // rank_NNNNN.safetensors
  int rank = 0;
  std::vector<std::vector<float>> copies;  // background: the snapshot of CPU pieces
  std::vector<Tensor> host_copies;         // device pieces read back (GPU runs)
  std::vector<checkpoint::TensorToWrite> tensors;
  json placements = json::array();
  json index;  // world rank 0: the step's index fields, taken at the snapshot
  std::optional<FaultPlan> fault;
  // Written by the writer before it sets CheckpointSave::written_.
  json result;
  RankFailure error;
  double write_ms = 0;
};

namespace {

RankSaveJob snapshot_rank(const RankSetup& s, const RankModel& model, StepTail& tail, const std::string& tmp_dir,
                          bool copy) {
  RankSaveJob job;
  job.tmp_dir = tmp_dir;
  job.rank = s.world.rank();
  job.file = fmt::format("rank_{:05d}.safetensors", job.rank);
  const std::vector<LocalPiece> pieces = local_pieces(s, model, tail);
  job.host_copies.reserve(pieces.size());
  job.copies.reserve(pieces.size());
  for (const LocalPiece& piece : pieces) {
    if (!piece.owned) continue;
    std::span<const float> values;
    if (!piece.data.device().is_cpu()) {
      const Tensor& host = job.host_copies.emplace_back(ops::to_host(s.context, piece.data));
      values = std::span<const float>(host.data<float>(), static_cast<std::size_t>(host.numel()));
    } else {
      values = std::span<const float>(piece.data.data<float>(), static_cast<std::size_t>(piece.data.numel()));
      if (copy) values = job.copies.emplace_back(values.begin(), values.end());
    }
    const std::string name = piece.offset == 0 && piece.data.numel() == local_numel(*piece.param)
                                 ? piece.tensor
                                 : fmt::format("{}@{}", piece.tensor, piece.offset);
    job.tensors.push_back({name, "F32", {piece.data.numel()}, std::as_bytes(values)});
    const layers::ShardSpec& spec = piece.param->shard;
    job.placements.push_back({{"tensor", piece.tensor},
                              {"kind", piece.tensor == piece.param->name ? "parameter" : "optimizer_state"},
                              {"shape", dims_of(logical_shape(*piece.param))},
                              {"file", job.file},
                              {"name", name},
                              {"dim", spec.dim},
                              {"parts", spec.dim < 0 ? 1 : spec.parts},
                              {"index", spec.dim < 0 ? 0 : spec.index},
                              {"groups", spec.dim < 0 ? 1 : spec.groups},
                              {"begin", piece.offset + layers::expert_split_offset(spec)},
                              {"end", piece.offset + layers::expert_split_offset(spec) + piece.data.numel()}});
  }
  return job;
}

// Phase 2: this rank's file and the placement of every piece in it (a JSON text rank 0 gathers). File I/O
// only: safe on a thread beside the step loop (it reads nothing but the job).
json write_rank_file(RankSaveJob& job) {
  json out = {{"pieces", job.placements}};
  if (job.tensors.empty()) return out;
  const checkpoint::WrittenFile written =
      checkpoint::write_safetensors((fs::path(job.tmp_dir) / job.file).string(), job.tensors,
                                    {{"format", "cleave-checkpoint"}, {"rank", std::to_string(job.rank)}},
                                    kChecksumChunkBytes);
  for (std::size_t i = 0; i < job.tensors.size(); ++i) {  // one placement per tensor written, in order
    json chunks = json::array();
    for (std::uint64_t hash : written.chunk_checksums[i]) chunks.push_back(fmt::format("{:016x}", hash));
    out["pieces"][i]["chunk_bytes"] = kChecksumChunkBytes;
    out["pieces"][i]["chunks"] = std::move(chunks);
  }
  out["file"] = {{"name", job.file},
                 {"bytes", written.bytes},
                 {"checksum", checkpoint::checksum_text(written.checksum)},
                 {"header_checksum", checkpoint::checksum_text(written.header_checksum)}};
  if (job.fault) job.fault->fire(fmt::format("checkpoint writer of step {} ({} written)", job.fault->step, job.file));
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

// The index's "files" and "tensors" from every rank's write result (`results`: rank r's JSON text); `stats` counts
// the files and their bytes.
void add_rank_results(const std::vector<std::vector<char>>& results, json& index, CheckpointSaveStats& stats) {
  json files = json::object();
  json tensors = json::object();
  for (const auto& bytes : results) {
    const json rank = json::parse(std::string(bytes.begin(), bytes.end()));
    if (rank.contains("file")) {
      const json& f = rank["file"];
      files[f["name"].get<std::string>()] = {
          {"bytes", f["bytes"]}, {"checksum", f["checksum"]}, {"header_checksum", f["header_checksum"]}};
      stats.bytes += f["bytes"].get<std::int64_t>();
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
}

}  // namespace

CheckpointSave::CheckpointSave(RankSetup& s, RankModel& model, StepTail& tail, std::string root,
                               std::int64_t steps_done, bool background, std::optional<FaultPlan> fault)
    : root_(std::move(root)), steps_done_(steps_done), start_(std::chrono::steady_clock::now()) {
  RankFailure failure;
  if (s.reports()) {
    try {
      checkpoint::begin_step_dir(root_, steps_done);
    } catch (const std::exception& e) {
      failure = rank_failure(e);
    }
  }
  throw_if_any_rank_failed(s.world, failure);  // also orders every write after the directory exists
  const std::string tmp_dir = (fs::path(root_) / (".tmp-" + checkpoint::step_dir_name(steps_done))).string();
  try {
    job_ = std::make_unique<RankSaveJob>(snapshot_rank(s, model, tail, tmp_dir, background));
    job_->fault = std::move(fault);
    if (s.reports()) {
      job_->index = {{"format", "cleave-checkpoint"},
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
      if (!s.source.is_null()) job_->index["source"] = s.source;
    }
  } catch (const std::exception& e) {
    failure = rank_failure(e);
  }
  throw_if_any_rank_failed(s.world, failure);
  const auto write = [job = job_.get(), this] {
    const auto begin = std::chrono::steady_clock::now();
    try {
      job->result = write_rank_file(*job);
    } catch (const std::exception& e) {
      job->error = {fmt::format("checkpoint of step {} into {}: {}", steps_done_, job->tmp_dir, e.what()),
                    rank_failure(e).type};
    }
    job->write_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
    written_.store(true, std::memory_order_release);
  };
  if (background) writer_ = std::thread(write);
  else write();
}

CheckpointSave::~CheckpointSave() {
  if (writer_.joinable()) writer_.join();
  if (!committed_ && job_ && !job_->error.message.empty()) {
    log::warn("checkpoint: step {} was not committed; its writer failed: {}", steps_done_, job_->error.message);
  }
}

CheckpointSaveStats CheckpointSave::commit(RankSetup& s) {
  CLEAVE_ASSERT(!committed_, "CheckpointSave::commit called twice (step {})", steps_done_);
  committed_ = true;
  if (writer_.joinable()) writer_.join();
  throw_if_any_rank_failed(s.world, job_->error);
  const std::string text = job_->result.dump();
  const auto gathered = all_gather_values<char>(s.world, std::span<const char>(text.data(), text.size()));

  CheckpointSaveStats stats;
  RankFailure failure;
  if (s.reports()) {
    try {
      json index = std::move(job_->index);
      add_rank_results(gathered, index, stats);
      checkpoint::seal_index(index);  // last: it covers every other key
      const std::string tmp_dir = job_->tmp_dir;
      const std::string index_text = index.dump(1) + "\n";
      checkpoint::write_file_durable((fs::path(tmp_dir) / "index.json").string(), index_text);
      stats.bytes += static_cast<std::int64_t>(index_text.size());
      ++stats.files;
      stats.path = checkpoint::commit_step_dir(root_, steps_done_);
      checkpoint::prune_step_dirs(root_, static_cast<int>(s.config.checkpoint.keep_last));
      stats.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
      log::info("checkpoint: step {} saved to {} ({} in {}, {:.1f} ms, {:.1f} MB/s; rank 0 wrote its file in "
                "{:.1f} ms{})",
                steps_done_, stats.path, format_bytes(stats.bytes), count_of(stats.files, "file"), stats.ms,
                static_cast<double>(stats.bytes) / 1e6 / std::max(stats.ms * 1e-3, 1e-9), job_->write_ms,
                job_->copies.empty() && job_->host_copies.empty() ? "" : ", in the background");
    } catch (const std::exception& e) {
      failure = rank_failure(e);
    }
  }
  job_.reset();  // the snapshot's memory goes back before the next step
  throw_if_any_rank_failed(s.world, failure);  // nobody continues before the commit (or its failure) is known
  const std::vector<double> shared =
      reduce_doubles(s.world, {static_cast<double>(stats.bytes), static_cast<double>(stats.files), stats.ms},
                     comm::ReduceOp::kSum);
  stats.bytes = static_cast<std::int64_t>(shared[0]);
  stats.files = static_cast<int>(shared[1]);
  stats.ms = shared[2];
  stats.path = (fs::path(root_) / checkpoint::step_dir_name(steps_done_)).string();
  return stats;
}

CheckpointSaveStats save_checkpoint(RankSetup& s, RankModel& model, StepTail& tail, const std::string& root,
                                    std::int64_t steps_done) {
  CheckpointSave save(s, model, tail, root, steps_done, /*background=*/false);
  return save.commit(s);
}

}  // namespace cleave::train

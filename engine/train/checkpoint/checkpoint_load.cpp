// load_checkpoint (checkpoint_io.hpp): a weights-only checkpoint (weights_only.hpp) loads through load_weights
// (weight_source.hpp); a trained one reads index.json, checks it against this run (model, optimizer type, every
// tensor's logical shape) and reads each piece this rank holds (its tp shard, ZeRO-1 segment, its stage's
// tensors) from only the byte ranges of the saved pieces that overlap it (checkpoint_reader.hpp: coverage and
// sizes first, every chunk read verified against its checksum). So a checkpoint saved under one (tp, pp, dp,
// ZeRO) layout loads under any other, and no rank builds a logical tensor it does not hold whole. Everything is
// read and checked before anything is assigned; an error on any rank is thrown on all, as CheckpointDamage when
// it was damage on every failing rank (so --resume auto may fall back to an older checkpoint with the model as it
// was).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "engine/checkpoint/checkpoint_damage.hpp"
#include "engine/config/model_training_keys.hpp"
#include "engine/core/allocator.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/core/log.hpp"
#include "engine/train/checkpoint/checkpoint_io.hpp"
#include "engine/train/checkpoint/checkpoint_pieces.hpp"
#include "engine/train/checkpoint/checkpoint_reader.hpp"
#include "engine/train/checkpoint/weight_source.hpp"
#include "engine/train/checkpoint/weights_only.hpp"
#include "engine/train/parameter_shards.hpp"
#include "kernels/ops/ops.hpp"
#include "layers/layer_util.hpp"
#include "layers/parallel/shard.hpp"

namespace cleave::train {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// Outside a resumed run (cleave generate) model.seq_len may be any length up to the saved model.max_seq_len:
// rotary positions hold no table of seq_len rows (a learned one, gpt's, has no max_seq_len).
bool any_context(const json& saved, const std::string& key, const json& value, bool continue_run) {
  const json max = saved.contains("max_seq_len") ? saved.at("max_seq_len") : json();
  return !continue_run && key == "seq_len" && value.is_number_integer() && max.is_number_integer() &&
         value.get<std::int64_t>() <= max.get<std::int64_t>();
}

// "model.d_model: 64 in the checkpoint, 32 in the config" for every differing key. The model's training keys
// (aux_loss_coef, ...: no parameter depends on them) are left to the resume's config-change check.
std::string model_differences(const json& saved, const json& current, bool continue_run) {
  std::string out;
  for (const auto& [key, value] : current.items()) {
    if (config::is_model_training_key(key)) continue;
    const json other = saved.contains(key) ? saved.at(key) : json();
    if (other != value && !any_context(saved, key, value, continue_run)) {
      out += fmt::format("{}model.{}: {} in the checkpoint, {} in the config", out.empty() ? "" : "; ", key,
                         other.is_null() ? "absent" : other.dump(), value.dump());
    }
  }
  return out;
}

// A resumed run must continue the checkpoint's random streams (checkpoint_save.cpp: rng_state_json): the
// same seed and the same samples per step, else step k+1 would not be the step an uninterrupted run takes.
void check_continues_run(const json& index, const config::RunConfig& config, std::int64_t global_batch,
                         const std::string& step_dir) {
  const json& rng = index.contains("rng") ? index.at("rng") : json::object();
  const std::uint64_t seed = rng.contains("seed") ? rng.at("seed").get<std::uint64_t>()
                                                  : index.at("seed").get<std::uint64_t>();
  CLEAVE_CHECK_FITS(seed == config.train.seed,
               "--resume {}: the checkpoint's data streams were drawn with train.seed {}, the config has {}; set "
               "train.seed={} to continue that run (or start a fresh run in another train.out_dir)",
               step_dir, seed, config.train.seed, seed);
  const std::int64_t step = index.at("step").get<std::int64_t>();
  const std::int64_t consumed = index.at("consumed_samples").get<std::int64_t>();
  CLEAVE_CHECK_FITS(consumed == step * global_batch,
               "--resume {}: the checkpoint consumed {} samples in {} steps ({} per step), but "
               "batch.global_batch_size is {}; set batch.global_batch_size={} to continue that run's data stream",
               step_dir, consumed, step, step > 0 ? consumed / step : 0, global_batch,
               step > 0 ? consumed / step : global_batch);
}

// A trained checkpoint: parameters, optimizer state and step count.
std::int64_t load_trained(RankSetup& s, RankModel& model, StepTail& tail, const std::string& step_dir,
                          bool continue_run) {
  const auto start = std::chrono::steady_clock::now();
  RankFailure failure;
  std::int64_t step = 0;
  std::int64_t bytes_read = 0;
  std::int64_t steps_done = 0;
  std::vector<LocalPiece> pieces = local_pieces(s, model, tail);
  std::vector<std::vector<float>> values(pieces.size());
  try {
    CheckpointReader reader(step_dir);
    const json& index = reader.index();
    const json model = json::parse(config::to_json(s.config)).at("model");
    const std::string differences = model_differences(index.at("model"), model, continue_run);
    CLEAVE_CHECK_FITS(differences.empty(), "checkpoint {} was saved from a different model: {}", step_dir, differences);
    const std::string saved_optimizer = index.at("optimizer").at("type").get<std::string>();
    CLEAVE_CHECK_FITS(saved_optimizer == enum_name(s.config.optimizer.type),
                 "checkpoint {} holds {} optimizer state, but optimizer.type is {}", step_dir, saved_optimizer,
                 s.config.optimizer.type);
    if (continue_run) check_continues_run(index, s.config, s.batch.global_batch_size, step_dir);
    step = index.at("step").get<std::int64_t>();
    steps_done = index.at("optimizer").at("steps_done").get<std::int64_t>();
    CLEAVE_CHECK_FITS(step <= s.config.train.steps,
                 "checkpoint {} holds step {}, beyond train.steps {}; raise train.steps to continue it", step_dir, step,
                 s.config.train.steps);
    // Every file's size and header (rank 0, for all: a cut or missing file fails here, before its tensors' bytes
    // are read; each rank checks its own files again as it opens them).
    if (s.world.rank() == 0) reader.check_files();
    // Each piece straight from the byte ranges that hold it: never the logical tensor, nor the whole tp shard
    // when the piece is a ZeRO-1 segment of it.
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      const LocalPiece& piece = pieces[i];
      const layers::ShardSpec spec =
          piece.param->shard.dim < 0 ? layers::replicated_spec(logical_shape(*piece.param)) : piece.param->shard;
      values[i].resize(static_cast<std::size_t>(piece.data.numel()));
      reader.read_shard_range(piece.tensor, spec, piece.offset, values[i]);
    }
    bytes_read = reader.bytes_read();
  } catch (const std::exception& e) {
    failure = rank_failure(e);
  }
  throw_if_any_rank_failed(s.world, failure);
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].data.device().is_cpu()) {
      std::memcpy(pieces[i].data.data<float>(), values[i].data(), values[i].size() * sizeof(float));
    } else {  // GPU runs: through one host buffer at a time
      const Shape flat{pieces[i].data.numel()};
      ops::transfer(s.context, Tensor::from_floats(values[i], flat), pieces[i].data.view(flat));
      ops::synchronize(s.context);
    }
  }
  tail.set_optimizer_steps_done(steps_done);
  if (tail.parameter_shards() != nullptr) tail.parameter_shards()->refresh_working();  // ZeRO-3: the shards were loaded
  else layers::refresh_working_copies(model.params(), s.context);
  if (s.reports()) {
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    log::info("checkpoint: {} {} (step {}; rank 0 read {} in {:.1f} ms, {:.1f} MB/s)",
              continue_run ? "resumed from" : "loaded", step_dir, step,
              format_bytes(bytes_read), ms, static_cast<double>(bytes_read) / 1e6 / std::max(ms * 1e-3, 1e-9));
  }
  return step;
}

// A weights-only checkpoint (cleave import): its parameters only, at step 0; nothing to continue.
std::int64_t load_weights_only(RankSetup& s, RankModel& model, StepTail& tail, const std::string& step_dir,
                               bool continue_run) {
  CLEAVE_CHECK_INPUT(!continue_run,
                     "--resume {}: this checkpoint holds weights only (written by cleave import): there is no run to "
                     "continue; nothing was loaded or written. Start one from it with cleave train CONFIG --init-from {}",
                     step_dir, step_dir);
  const WeightSource source = open_weight_source(step_dir);
  FullParameters whole(tail.parameter_shards());
  const std::size_t tensors = load_weights(s, model, source);
  if (s.reports()) log::info("checkpoint: loaded {} (weights only, {} tensors on rank 0)", step_dir, tensors);
  return 0;
}

}  // namespace

std::int64_t load_checkpoint(RankSetup& s, RankModel& model, StepTail& tail, const std::string& step_dir,
                             bool continue_run) {
  if (is_weights_only(CheckpointReader(step_dir).index())) {
    return load_weights_only(s, model, tail, step_dir, continue_run);
  }
  return load_trained(s, model, tail, step_dir, continue_run);
}

}  // namespace cleave::train

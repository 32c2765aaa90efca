// The keys that would do nothing as given (config.hpp: keys_without_effect, keys_without_effect_in_layout): another
// optimizer's hyperparameters, min_lr under a constant schedule, zero_reduce below ZeRO-2, eval_interval with
// evaluation off, val_fraction beside a val_path, the checkpoint keys when nothing is saved, device.blas on cuda, and,
// once the world is known, the keys the layout leaves idle. Each is a note (one line naming the key, its value and
// why) that the run logs, never a refusal: the refusals of keys without effect are validate.cpp's
// (check_keys_take_effect).
#include <fmt/format.h>

#include <filesystem>
#include <string>
#include <vector>

#include "engine/config/config.hpp"

namespace cleave::config {

std::vector<std::string> keys_without_effect(const RunConfig& c) {
  std::vector<std::string> notes;
  const auto& o = c.optimizer;
  const OptimizerConfig defaults;
  if (o.type == OptimizerType::kSgd && o.betas != defaults.betas) {
    notes.push_back(fmt::format("optimizer.betas [{}, {}] has no effect: it is AdamW's, and optimizer.type is \"sgd\"",
                                o.betas[0], o.betas[1]));
  }
  if (o.type == OptimizerType::kSgd && o.eps != defaults.eps) {
    notes.push_back(fmt::format("optimizer.eps {} has no effect: it is AdamW's, and optimizer.type is \"sgd\"", o.eps));
  }
  if (o.type == OptimizerType::kAdamw && o.momentum != defaults.momentum) {
    notes.push_back(fmt::format("optimizer.momentum {} has no effect: it is SGD's, and optimizer.type is \"adamw\" (its "
                                "moments are optimizer.betas)", o.momentum));
  }
  if (o.schedule == LrScheduleType::kConstant && o.min_lr != defaults.min_lr) {
    notes.push_back(fmt::format("optimizer.min_lr {} has no effect: optimizer.schedule \"constant\" keeps optimizer.lr "
                                "after the warm-up (min_lr is where cosine and linear end)", o.min_lr));
  }
  if (o.zero_stage < 2 && o.zero_reduce != ZeroReduce::kAuto) {
    notes.push_back(fmt::format("optimizer.zero_reduce {} has no effect with optimizer.zero_stage {} (it chooses how "
                                "ZeRO-2 and 3 reduce gradients)", o.zero_reduce, o.zero_stage));
  }
  if (c.train.eval_batches == 0 && c.train.eval_interval > 0) {
    notes.push_back(fmt::format("train.eval_interval {} has no effect: train.eval_batches 0 turns evaluation off",
                                c.train.eval_interval));
  }
  const auto& d = c.data;
  if (!d.val_path.empty() && d.val_fraction > 0.0 && d.val_fraction != DataConfig{}.val_fraction) {
    notes.push_back(fmt::format("data.val_fraction {} has no effect: data.val_path is the evaluation file, and the "
                                "training data is used whole", d.val_fraction));
  }
  const auto& k = c.checkpoint;
  const CheckpointConfig checkpoint_defaults;
  if (k.interval == 0 && !k.save_final) {
    // Nothing is saved but the preemption notice's checkpoint (SIGUSR1, train/stop_request.hpp): every key that
    // shapes the saves is idle. checkpoint.dir is still where --resume auto looks, so it is named as such.
    const std::string why = "checkpoint.interval 0 and checkpoint.save_final false save no checkpoint (only "
                            "SIGUSR1, the preemption notice, does); set checkpoint.interval N or "
                            "checkpoint.save_final=true to save";
    if (k.keep_last != checkpoint_defaults.keep_last) {
      notes.push_back(fmt::format("checkpoint.keep_last {} has no effect: {}", k.keep_last, why));
    }
    if (k.background != checkpoint_defaults.background) {
      notes.push_back(fmt::format("checkpoint.background false has no effect: {}", why));
    }
    const std::string default_dir = (std::filesystem::path(c.train.out_dir) / "checkpoints").string();
    if (!k.dir.empty() && k.dir != default_dir) {
      notes.push_back(fmt::format("checkpoint.dir {} receives nothing: {} (it is only where --resume auto looks)",
                                  k.dir, why));
    }
  }
  if (c.device.type == DeviceType::kCuda && c.device.blas != ops::CpuBlas::kAuto) {
    notes.push_back(fmt::format("device.blas {} has no effect on device.type \"cuda\" (it picks the cpu backend's GEMM "
                                "library)", c.device.blas));
  }
  return notes;
}

std::vector<std::string> keys_without_effect_in_layout(const RunConfig& c, const LayoutFacts& layout) {
  std::vector<std::string> notes;
  const auto& p = c.parallel;
  // A split of the blocks into stages needs stages: with one, the method chooses nothing.
  if (layout.stages == 1 && p.partition.method != PartitionConfig{}.method && p.partition.method != PartitionMethod::kManual) {
    notes.push_back(fmt::format("parallel.partition.method {} has no effect: the model runs as one stage (it splits "
                                "the blocks into pipeline stages)", p.partition.method));
  }
  // A progress thread advances transfers between ranks: a world of one has none to advance.
  if (layout.world_size == 1 && p.p2p_progress == P2PProgress::kThread) {
    notes.push_back("parallel.p2p_progress \"thread\" has no effect: the world is one rank, with no transfers for a "
                    "progress thread to advance (it matters under mpirun -np N with N > 1)");
  }
  // Gradient buckets exist to be reduced over dp x cp replicas, and ZeRO shards over them: with one, no bucket is
  // made or sent and nothing is sharded.
  if (layout.reducing_replicas == 1) {
    const ParallelConfig defaults;
    if (p.dp_bucket_mb != defaults.dp_bucket_mb) {
      notes.push_back(fmt::format("parallel.dp_bucket_mb {} has no effect: data_parallel_size x context_parallel_size "
                                  "is 1, so no gradient is reduced", p.dp_bucket_mb));
    }
    if (p.grad_reduce_dtype != defaults.grad_reduce_dtype) {
      notes.push_back(fmt::format("parallel.grad_reduce_dtype {} has no effect: data_parallel_size x "
                                  "context_parallel_size is 1, so no gradient is reduced", p.grad_reduce_dtype));
    }
    if (c.optimizer.zero_stage > 0) {
      notes.push_back(fmt::format("optimizer.zero_stage {} has no effect: data_parallel_size x context_parallel_size "
                                  "is 1, so there is no replica to shard over (training unsharded)",
                                  c.optimizer.zero_stage));
    }
  }
  return notes;
}

}  // namespace cleave::config

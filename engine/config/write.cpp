// RunConfig -> JSON text (config.hpp, to_json()): every key in the documented order, enum values by their name
// tables, so parse_config(to_json(c)) == c. A model writes only its own type's keys.
#include <nlohmann/json.hpp>

#include <string>

#include "engine/config/config.hpp"

namespace cleave::config {
namespace {

using ordered_json = nlohmann::ordered_json;  // to_json keeps the documented key order

// An enum-valued key as the text its name table gives it.
template <NamedEnum E>
std::string text(E value) {
  return std::string(enum_name(value));
}

ordered_json write_model(const ModelConfig& m) {
  ordered_json j = {{"type", text(m.type)}};
  if (m.type == ModelType::kGpt) {
    const auto& g = m.gpt;
    j.update({{"vocab_size", g.vocab_size}, {"d_model", g.d_model}, {"n_layers", g.n_layers}, {"n_heads", g.n_heads},
              {"seq_len", g.seq_len}, {"d_ff", g.d_ff == 0 ? 4 * g.d_model : g.d_ff},
              {"tie_embeddings", g.tie_embeddings}});
  } else if (m.type == ModelType::kMlp) {
    const auto& c = m.mlp;
    j.update({{"in_features", c.in_features}, {"hidden", c.hidden}, {"num_classes", c.num_classes},
              {"activation", text(c.activation)}});
  } else {
    const auto& c = m.cnn;
    j.update({{"in_channels", c.in_channels}, {"height", c.height}, {"width", c.width}, {"channels", c.channels},
              {"kernel", c.kernel}, {"pool", c.pool}, {"num_classes", c.num_classes}});
  }
  return j;
}

ordered_json to_json_tree(const RunConfig& c) {
  ordered_json j;
  j["model"] = write_model(c.model);
  const auto& p = c.parallel;
  j["parallel"] = {{"tensor_model_parallel_size", p.tensor_model_parallel_size},
                   {"pipeline_model_parallel_size", p.pipeline_model_parallel_size},
                   {"data_parallel_size", p.data_parallel_size},
                   {"virtual_pipeline_stages", p.virtual_pipeline_stages},
                   {"schedule", p.schedule},
                   {"auto_schedule_memory_limit", p.auto_schedule_memory_limit},
                   {"auto_schedule_profile", p.auto_schedule_profile},
                   {"partition", {{"method", text(p.partition.method)}, {"blocks_per_stage", p.partition.blocks_per_stage}}},
                   {"dp_bucket_mb", p.dp_bucket_mb},
                   {"grad_reduce_dtype", text(p.grad_reduce_dtype)},
                   {"comm_backend", text(p.comm_backend)},
                   {"p2p_progress", text(p.p2p_progress)}};
  ordered_json batch = ordered_json::object();
  if (c.batch.global_batch_size) batch["global_batch_size"] = *c.batch.global_batch_size;
  if (c.batch.micro_batch_size) batch["micro_batch_size"] = *c.batch.micro_batch_size;
  if (c.batch.gradient_accumulation_steps) batch["gradient_accumulation_steps"] = *c.batch.gradient_accumulation_steps;
  j["batch"] = batch;
  const auto& o = c.optimizer;
  j["optimizer"] = {{"type", text(o.type)},         {"lr", o.lr},
                    {"weight_decay", o.weight_decay}, {"betas", o.betas},
                    {"eps", o.eps},           {"momentum", o.momentum},
                    {"nesterov", o.nesterov}, {"grad_clip", o.grad_clip},
                    {"warmup_steps", o.warmup_steps}, {"schedule", text(o.schedule)},
                    {"min_lr", o.min_lr},     {"zero_stage", o.zero_stage}};
  const auto& t = c.train;
  j["train"] = {{"steps", t.steps},         {"seed", t.seed},
                {"log_interval", t.log_interval}, {"deterministic", t.deterministic},
                {"out_dir", t.out_dir},     {"comm_timeout_s", t.comm_timeout_s},
                {"trace", t.trace},         {"eval_interval", t.eval_interval},
                {"eval_batches", t.eval_batches}, {"recompute", text(t.recompute)}, {"report", t.report}};
  j["checkpoint"] = {{"dir", c.checkpoint.dir},
                     {"interval", c.checkpoint.interval},
                     {"keep_last", c.checkpoint.keep_last},
                     {"save_final", c.checkpoint.save_final}};
  const auto& d = c.data;
  j["data"] = {{"type", text(d.type)}, {"path", d.path}, {"val_path", d.val_path}, {"val_fraction", d.val_fraction},
               {"format", text(d.format)}};
  j["device"] = {{"type", text(c.device.type)}, {"memory_limit", c.device.memory_limit}, {"precision", text(c.device.precision)}};
  return j;
}

}  // namespace

std::string to_json(const RunConfig& config) { return to_json_tree(config).dump(2) + "\n"; }

}  // namespace cleave::config

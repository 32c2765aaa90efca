// next_token_logits (generation.hpp): a forward of the whole model (one rank holds it) over a token window, stopping
// before the loss block (StageModule::infer), and the last position's logits. The sampling policy lives in
// the caller (engine/cli/generate.cpp).
#include <cstring>

#include "engine/core/error.hpp"
#include "engine/train/generation.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::train {

std::vector<float> next_token_logits(RankSetup& s, const RankModel& model, const std::vector<std::int32_t>& tokens) {
  CLEAVE_CHECK(partition::is_language_model(s.plan.spec.type), "generation needs a gpt or llama model, this one is {}",
               s.plan.spec.type);
  CLEAVE_CHECK(s.world.size() == 1 && model.stages().size() == 1 && s.plan.num_stages() == 1,
               "generation runs the whole model on one rank (world size {}, {} stages)", s.world.size(),
               s.plan.num_stages());
  CLEAVE_CHECK(!tokens.empty(), "generation needs at least one token of context");
  const Shape window{1, static_cast<std::int64_t>(tokens.size())};
  Tensor host = Tensor::empty(window, DType::kI32, MemoryCategory::kActivations, s.host_allocator());
  std::memcpy(host.data<std::int32_t>(), tokens.data(), tokens.size() * sizeof(std::int32_t));
  Tensor ids = s.on_device() ? ops::to_device(s.context, host, MemoryCategory::kActivations) : host;
  const Tensor logits = model.stages().front()->infer(ids, s.context);
  ops::check_device_status(s.context);  // a token id a GPU kernel found outside the vocabulary (no-op on the CPU)
  const std::int64_t vocab = logits.dim(logits.rank() - 1);
  const std::vector<float> all = (s.on_device() ? ops::to_host(s.context, logits) : logits).to_floats();
  CLEAVE_ASSERT(static_cast<std::int64_t>(all.size()) >= vocab, "logits of {} values, vocab {}", all.size(), vocab);
  return {all.end() - vocab, all.end()};
}

}  // namespace cleave::train

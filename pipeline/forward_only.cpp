// Forward-only schedule (see forward_only.hpp).
#include "pipeline/forward_only.hpp"

namespace cleave::pipeline {

Schedule forward_only_schedule(const Schedule& training) {
  Schedule out = make_empty_schedule(training.name + " (forward only)", training.pp_size, training.num_microbatches,
                                     training.virtual_stages, training.stage_to_rank);
  for (int rank = 0; rank < out.pp_size; ++rank) {
    auto& actions = out.ranks[static_cast<std::size_t>(rank)];
    const std::vector<int> stages = out.stages_of(rank);
    for (int mb = 0; mb < out.num_microbatches; ++mb) {
      for (int stage : stages) {
        if (stage > 0 && out.rank_of(stage - 1) != rank) actions.push_back({ActionKind::kRecvF, stage, mb});
        actions.push_back({ActionKind::kForward, stage, mb});
        if (stage + 1 < out.num_stages && out.rank_of(stage + 1) != rank) {
          actions.push_back({ActionKind::kSendF, stage, mb});
        }
      }
    }
  }
  return out;
}

}  // namespace cleave::pipeline

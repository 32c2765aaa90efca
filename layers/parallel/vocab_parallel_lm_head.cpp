// VocabParallelLmHead: a bias-free ColumnParallelLinear over the (possibly tied) vocabulary shard.
#include "layers/parallel/vocab_parallel_lm_head.hpp"

namespace cleave::layers {

VocabParallelLmHead::VocabParallelLmHead(std::string prefix, std::shared_ptr<Param> weight, bool tied, int tp_size,
                                         int tp_rank)
    : linear_(std::move(prefix), std::move(weight), nullptr, tp_size, tp_rank), tied_(tied) {}

}  // namespace cleave::layers

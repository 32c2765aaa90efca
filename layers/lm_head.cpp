// LmHead: a bias-free Linear whose weight may be the embedding's token table.
#include "layers/lm_head.hpp"

namespace cleave::layers {

LmHead::LmHead(std::string prefix, std::shared_ptr<Param> weight, bool tied)
    : linear_(std::move(prefix), std::move(weight), nullptr), tied_(tied) {}

}  // namespace cleave::layers

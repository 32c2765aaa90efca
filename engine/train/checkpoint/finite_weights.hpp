// Weights refused when they are not finite: `cleave import` and `train --init-from` check every tensor they read
// before anything is written or assigned, so a NaN or an infinity in a downloaded or converted file is reported
// with the tensor's name at once, not as a divergence blamed on the learning rate at step 1.
//
// Invariant: a tensor passes only when every element is finite; the message names the source, the tensor, how
// many elements are bad and the first of them (index and value).
#pragma once

#include <span>
#include <string_view>

namespace cleave::train {

// Throws cleave::Error "<source>: tensor <name> holds N non-finite values of M (first: element i is nan); ..."
// when `values` holds a NaN or an infinity.
void check_finite_weights(std::string_view source, std::string_view name, std::span<const float> values);

}  // namespace cleave::train

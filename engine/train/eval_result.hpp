// The result of an evaluation pass (evaluation.hpp): mean loss and accuracy over the evaluated items, summed over the
// world. Its own header so that evaluation.hpp and trainer.hpp both read it and neither includes the other (the
// Trainer calls the evaluation; the evaluation never sees the Trainer).
#pragma once

#include <cstdint>

namespace cleave::train {

struct EvalResult {
  double loss = 0;
  double accuracy = 0;  // next-token or class accuracy over every evaluated item
  std::int64_t items = 0;  // 0 when no evaluation ran
};

}  // namespace cleave::train

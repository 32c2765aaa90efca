// Linear: y[..., out] = x[..., in] · Wᵀ + b, weight stored [out, in] as in PyTorch.
//
// Stash after forward: {x}. After backward_input: {x, dy} (the weight GEMM needs both). backward_weight
// accumulates dW += dyᵀ·x and db += Σ dy, then clears the stash. The weight may be a Param shared with
// another layer (a tied LM head uses the embedding table).
#pragma once

#include <memory>
#include <string>

#include "layers/layer.hpp"
#include "layers/param_init.hpp"

namespace cleave::layers {

class Linear final : public Layer {
 public:
  // Creates "<prefix>.weight" [out, in] and, when `bias`, "<prefix>.bias" [out], initialised per `init`.
  Linear(std::string prefix, std::int64_t in_features, std::int64_t out_features, bool bias, const ParamInit& init);
  // Uses existing Params: weight [out, in], bias [out] or null.
  Linear(std::string prefix, std::shared_ptr<Param> weight, std::shared_ptr<Param> bias);

  std::string_view kind() const override { return "linear"; }
  Tensor forward(const Tensor& x, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;
  void backward_weight(Stash& stash, Context& ctx) override;
  std::vector<std::shared_ptr<Param>> params() const override;

  std::int64_t in_features() const { return in_; }
  std::int64_t out_features() const { return out_; }
  const std::shared_ptr<Param>& weight() const { return weight_; }
  const std::shared_ptr<Param>& bias() const { return bias_; }

 private:
  const std::string& who() const { return who_; }
  std::string make_who() const;

  std::string prefix_;
  std::shared_ptr<Param> weight_;
  std::shared_ptr<Param> bias_;
  std::int64_t in_ = 0;
  std::int64_t out_ = 0;
  std::string who_ = make_who();  // last: built once from the members above, so no call builds a string
};

}  // namespace cleave::layers

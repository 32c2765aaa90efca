// Conv2d, NCHW, square kernel, stride 1 by default and "same" padding kernel / 2 unless given:
// x [N, C, H, W] -> [N, C', H', W']. Weight "<prefix>.weight" [C', C, k, k], bias "<prefix>.bias" [C'].
//
// Stash after forward: {x}; after backward_input: {x, dy}. The im2col buffer is kWorkspace scratch,
// allocated per call and freed on return (never stashed).
#pragma once

#include <memory>
#include <string>

#include "kernels/ops/ops.hpp"
#include "layers/layer.hpp"
#include "layers/param_init.hpp"

namespace cleave::layers {

class Conv2d final : public Layer {
 public:
  Conv2d(std::string prefix, std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel,
         const ParamInit& init, std::int64_t stride = 1, std::int64_t padding = -1 /* kernel / 2 */);

  std::string_view kind() const override { return "conv2d"; }
  Tensor forward(const Tensor& x, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;
  void backward_weight(Stash& stash, Context& ctx) override;
  std::vector<std::shared_ptr<Param>> params() const override { return {weight_, bias_}; }

 private:
  ops::Conv2dParams conv_params() const { return {stride_, padding_}; }

  std::string prefix_;
  std::int64_t in_channels_, out_channels_, kernel_, stride_, padding_;
  std::shared_ptr<Param> weight_;
  std::shared_ptr<Param> bias_;
};

}  // namespace cleave::layers

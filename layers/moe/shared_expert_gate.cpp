// Qwen2-MoE's sigmoid-gated shared expert (see shared_expert_gate.hpp).
#include "layers/moe/shared_expert_gate.hpp"

#include <cmath>
#include <cstring>
#include <numeric>
#include <span>
#include <vector>

#include "kernels/ops/ops.hpp"
#include "layers/layer_util.hpp"
#include "layers/parallel/shard.hpp"
#include "layers/parallel/sharded_param.hpp"

namespace cleave::layers {
namespace {

enum Slot : std::size_t { kX, kShared, kSigmoid, kIdentity, kSigmoidHost, kNumSlots };
enum BackSlot : std::size_t { kBX, kBDlogit };

Tensor rows_of(const Tensor& t) { return t.view(Shape{t.numel() / t.shape().last(), t.shape().last()}); }

template <typename T>
Tensor upload(const Context& ctx, const std::vector<T>& values, const Shape& shape, DType dtype) {
  Tensor host = Tensor::empty(shape, dtype, MemoryCategory::kActivations, cpu_allocator());
  if (!values.empty()) std::memcpy(host.raw_data(), values.data(), values.size() * sizeof(T));
  return ops::to_device(ctx, host, MemoryCategory::kActivations);
}

}  // namespace

SharedExpertGate::SharedExpertGate(std::string prefix, std::int64_t d, LayerPtr shared, const ParamInit& init)
    : prefix_(std::move(prefix)), d_(d), shared_(std::move(shared)) {
  CLEAVE_ASSERT(d > 0 && shared_ != nullptr, "{}: d {} and a shared expert are required", who(), d);
  weight_ = make_sharded_param(prefix_ + ".weight", replicated_spec(Shape{1, d}), true, init.allocator);
  init_shard_weight(*weight_, d, init);
}

Tensor SharedExpertGate::forward(const Tensor& x, Stash& stash, Context& ctx) {
  check_input(ctx, x, DType::kF32, d_, 2, who());
  stash.reset(1);
  const Tensor s = shared_->forward(x, stash.children[0], ctx);
  const Tensor xr = rows_of(x);
  const std::int64_t n = xr.dim(0);
  Tensor logit = new_activation(ctx, Shape{n, 1}, DType::kF32);
  ops::GemmOptions nt;
  nt.trans_b = true;
  ops::gemm(ctx, xr, weight_->compute(), logit, nt);
  const Tensor logit_host = ops::to_host(ctx, logit);  // f32
  std::vector<float>& sig = sig_;
  sig.assign(logit_host.span<float>().begin(), logit_host.span<float>().end());
  for (float& v : sig) v = 1.0f / (1.0f + std::exp(-v));
  identity_.resize(static_cast<std::size_t>(n));
  std::iota(identity_.begin(), identity_.end(), 0);
  const Tensor sig_t = upload(ctx, sig, Shape{n}, DType::kF32);
  const Tensor index = upload(ctx, identity_, Shape{n}, DType::kI32);
  Tensor y = new_activation(ctx, s.shape());
  ops::moe_gather(ctx, rows_of(s), index, sig_t, rows_of(y));  // y[n] = sigmoid[n] · s[n]
  // The backward's σ: a host copy on a GPU (nothing read back there); the CPU's sig_t is host memory already.
  const Tensor sig_host = ctx.device.is_cpu() ? Tensor() : Tensor::from_floats(sig, Shape{n});
  stash.tensors = {x, s, sig_t, index, sig_host};
  return y;
}

Tensor SharedExpertGate::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  CLEAVE_ASSERT(stash.tensors.size() == kNumSlots, "{}: backward_input without forward", who());
  const Tensor& s = stash.tensors[kShared];
  const Tensor& sig_t = stash.tensors[kSigmoid];
  const Tensor& index = stash.tensors[kIdentity];
  const Tensor dyr = rows_of(dy);
  const std::int64_t n = dyr.dim(0);
  // The gate's gradient: dsigmoid[n] = dy[n] · s[n], dlogit = dsigmoid · σ (1 - σ).
  Tensor dsig = new_workspace(ctx, Shape{n, 1});
  ops::moe_combine_weight_grad(ctx, dyr, rows_of(s), index.view(Shape{n, 1}), dsig);
  const Tensor dsig_host = ops::to_host(ctx, dsig);  // f32
  std::vector<float>& dlogit = dlogit_;
  dlogit.assign(dsig_host.span<float>().begin(), dsig_host.span<float>().end());
  const std::span<const float> sig = (ctx.device.is_cpu() ? sig_t : stash.tensors[kSigmoidHost]).span<float>();
  for (std::size_t i = 0; i < dlogit.size(); ++i) dlogit[i] *= sig[i] * (1.0f - sig[i]);
  const Tensor dlogit_f32 = upload(ctx, dlogit, Shape{n, 1}, DType::kF32);
  Tensor dlogit_t = new_activation(ctx, Shape{n, 1});
  ops::copy(ctx, dlogit_f32, dlogit_t);
  // The shared expert's output gradient, dy scaled by the gate.
  Tensor ds = new_activation(ctx, dy.shape());
  ops::moe_gather(ctx, dyr, index, sig_t, rows_of(ds));
  Tensor dx = shared_->backward_input(ds, stash.children[0], ctx);
  ops::GemmOptions acc;
  acc.beta = 1.0f;
  ops::gemm(ctx, dlogit_t, weight_->compute(), rows_of(dx), acc);  // dx += dlogit · w
  stash.tensors = {stash.tensors[kX], dlogit_t};
  return dx;
}

void SharedExpertGate::backward_weight(Stash& stash, Context& ctx) {
  CLEAVE_ASSERT(stash.tensors.size() == 2, "{}: backward_weight without backward_input", who());
  ops::GemmOptions tn;
  tn.trans_a = true;
  tn.beta = 1.0f;
  ops::gemm(ctx, stash.tensors[kBDlogit], rows_of(stash.tensors[kBX]), weight_->grad, tn);  // dw += dlogit^T · x
  shared_->backward_weight(stash.children[0], ctx);
  stash.clear();
}

std::vector<std::shared_ptr<Param>> SharedExpertGate::params() const {
  std::vector<std::shared_ptr<Param>> out = shared_->params();
  out.push_back(weight_);
  return out;
}

}  // namespace cleave::layers

// The CUDA backend's table and its per-device resources, with the slots of the element-wise, bias, GELU,
// LayerNorm and optimizer kernels; the loss, embedding and convolution families live in their own files
// (cuda_slots.hpp). Compiled only in CUDA builds (cmake/CleaveCuda.cmake); NOT yet run on a GPU (no device was
// lent when it was written; issue "Training on GPUs" carries the bring-up).
//
// Invariants: every slot launches on ctx.stream and returns without waiting, except the host values of
// ops.hpp (sum_squares, sum_squares_many, count_correct, check_device_status). Bad user data found by a
// kernel is recorded in the resources' DeviceStatus and thrown by check_device_status at the step's end, never
// by a synchronising check per call. Scratch comes from ctx.allocator, which must be the device's caching
// allocator. Ops whose CUDA kernel does not exist yet have null slots, so the seam says "<op> is not
// implemented on cuda:N"; an f32-only kernel given bf16 tensors refuses the same way, naming the dtype.
#include <cuda_runtime_api.h>

#include <vector>

#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/stream.hpp"
#include "kernels/cuda/adamw.hpp"
#include "kernels/cuda/bias.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/gelu.hpp"
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/layernorm.hpp"
#include "kernels/cuda/sum_squares_many.hpp"
#include "kernels/ops/backend.hpp"
#include "kernels/ops/cuda/cuda_slots.hpp"

namespace cleave::ops {
namespace {

namespace kd = kernels::cuda;
using cuda_detail::scratch;
using cuda_detail::stream_of;

class CudaResources final : public DeviceResources {
 public:
  explicit CudaResources(int device) : conv(device), status(device) {}
  kd::GemmContext gemm;
  kd::ConvContext conv;               // cuDNN handle (created on first use) and chosen algorithms
  cuda_detail::DeviceStatus status;   // deferred user-data errors (check_device_status)
};

CudaResources& resources_of(const Context& ctx) {
  auto* resources = dynamic_cast<CudaResources*>(ctx.resources);
  CLEAVE_CHECK(resources != nullptr, "ops on {}: the context has no CUDA resources (Context::resources; create them "
               "with make_device_resources)", ctx.device.str());
  return *resources;
}

kd::GemmContext& gemm_context(const Context& ctx) { return resources_of(ctx).gemm; }

void require_f32(std::string_view op, const Tensor& t) {
  CLEAVE_CHECK(!t.defined() || t.dtype() == DType::kF32,
               "{} is not implemented for {} tensors on cuda (the kernel is f32 only so far)", op,
               dtype_name(t.dtype()));
}

float* f(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

void gemm(const Context& ctx, const GemmProblem& p) {
  kd::GemmArgs args;
  args.trans_a = p.trans_a;
  args.trans_b = p.trans_b;
  args.m = p.m;
  args.n = p.n;
  args.k = p.k;
  args.alpha = p.alpha;
  args.beta = p.beta;
  args.input_type = p.a.dtype();
  args.output_type = p.c.dtype();
  args.a = p.a.raw_data();
  args.lda = p.lda;
  args.stride_a = p.stride_a;
  args.b = p.b.raw_data();
  args.ldb = p.ldb;
  args.stride_b = p.stride_b;
  args.c = p.c.raw_data();
  args.ldc = p.ldc;
  args.stride_c = p.stride_c;
  args.batch = p.batch;
  if (p.epilogue == GemmEpilogue::kBias) {
    CLEAVE_CHECK(p.bias.dtype() == p.c.dtype(), "gemm on cuda: the bias epilogue needs a {} bias (C's dtype), got {}",
                 dtype_name(p.c.dtype()), dtype_name(p.bias.dtype()));
    args.epilogue = kd::GemmEpilogue::kBias;
    args.bias = p.bias.raw_data();
  }
  args.math = kd::GemmMath::kStrict;  // true f32 products (TF32 off): the CPU numerics contract
  const std::string refusal = kd::gemm_can_implement(args);
  CLEAVE_CHECK(refusal.empty(), "gemm on {}: {}", ctx.device.str(), refusal);
  const std::size_t bytes = kd::gemm_workspace_size(args);
  Tensor ws = scratch(ctx, bytes);
  kd::gemm(gemm_context(ctx), args, ws.raw_data(), bytes, stream_of(ctx));
}

void fill(const Context& ctx, const Tensor& t, float value) {
  require_f32("fill", t);
  if (value == 0.0f) {
    CLEAVE_CUDA_CHECK(cudaMemsetAsync(t.raw_data(), 0, t.nbytes(), stream_of(ctx)));
    return;
  }
  CLEAVE_THROW("fill with a non-zero value ({}) is not implemented on {} yet", value, ctx.device.str());
}

void copy(const Context& ctx, const Tensor& src, const Tensor& dst) {
  if (src.dtype() == dst.dtype()) {
    CLEAVE_CUDA_CHECK(
        cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.nbytes(), cudaMemcpyDeviceToDevice, stream_of(ctx)));
  } else if (dst.dtype() == DType::kBF16) {
    kd::cast_f32_to_bf16(src.data<float>(), static_cast<__nv_bfloat16*>(dst.raw_data()), src.numel(), stream_of(ctx));
  } else {
    kd::cast_bf16_to_f32(static_cast<const __nv_bfloat16*>(src.raw_data()), dst.data<float>(), src.numel(),
                         stream_of(ctx));
  }
}

void add(const Context& ctx, const Tensor& a, const Tensor& b, const Tensor& out) {
  require_f32("add", a), require_f32("add", b), require_f32("add", out);
  kd::add(f(a), f(b), f(out), a.numel(), stream_of(ctx));
}

void add_inplace(const Context& ctx, const Tensor& y, const Tensor& x) {
  require_f32("add_inplace", y), require_f32("add_inplace", x);
  kd::add_inplace(f(y), f(x), y.numel(), stream_of(ctx));
}

void scale_inplace(const Context& ctx, const Tensor& y, float alpha) {
  require_f32("scale_inplace", y);
  kd::scale_inplace(f(y), alpha, y.numel(), stream_of(ctx));
}

void axpy(const Context& ctx, float alpha, const Tensor& x, const Tensor& y) {
  require_f32("axpy", x), require_f32("axpy", y);
  kd::axpy(alpha, f(x), f(y), y.numel(), stream_of(ctx));
}

double sum_squares(const Context& ctx, const Tensor& x) {
  require_f32("sum_squares", x);
  const std::size_t bytes = kd::sum_squares_workspace_size(x.numel());
  Tensor ws = scratch(ctx, bytes);
  Tensor out = scratch(ctx, sizeof(double));
  kd::sum_squares(f(x), x.numel(), static_cast<double*>(out.raw_data()), ws.raw_data(), bytes, stream_of(ctx));
  double host = 0.0;
  CLEAVE_CUDA_CHECK(cudaMemcpyAsync(&host, out.raw_data(), sizeof host, cudaMemcpyDeviceToHost, stream_of(ctx)));
  CLEAVE_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
  return host;
}

void bias_add_forward(const Context& ctx, const Tensor& y, const Tensor& bias) {
  require_f32("bias_add_forward", y), require_f32("bias_add_forward", bias);
  kd::bias_add_forward(f(y), f(bias), y.shape().rows(), y.shape().last(), stream_of(ctx));
}

void bias_backward(const Context& ctx, const Tensor& dy, const Tensor& dbias) {
  require_f32("bias_backward", dy);
  const std::size_t bytes = kd::bias_backward_workspace_size(dy.shape().rows(), dy.shape().last());
  Tensor ws = scratch(ctx, bytes);
  kd::bias_backward(f(dy), f(dbias), dy.shape().rows(), dy.shape().last(), ws.raw_data(), bytes, stream_of(ctx));
}

void gelu_forward(const Context& ctx, const Tensor& x, const Tensor& y) {
  require_f32("gelu_forward", x), require_f32("gelu_forward", y);
  kd::gelu_forward(f(x), f(y), x.numel(), stream_of(ctx));
}

void gelu_backward(const Context& ctx, const Tensor& x, const Tensor& dy, const Tensor& dx) {
  require_f32("gelu_backward", x), require_f32("gelu_backward", dy), require_f32("gelu_backward", dx);
  kd::gelu_backward(f(x), f(dy), f(dx), x.numel(), stream_of(ctx));
}

void layernorm_forward(const Context& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd, float eps) {
  for (const Tensor* t : {&x, &gamma, &beta, &y}) require_f32("layernorm_forward", *t);
  kd::layernorm_forward(f(x), f(gamma), f(beta), f(y), f(mean), f(rstd), x.shape().rows(), x.shape().last(), eps,
                        stream_of(ctx));
}

void layernorm_backward_input(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                              const Tensor& mean, const Tensor& rstd, const Tensor& dx) {
  for (const Tensor* t : {&dy, &x, &gamma, &dx}) require_f32("layernorm_backward_input", *t);
  kd::layernorm_backward_input(f(dy), f(x), f(gamma), f(mean), f(rstd), f(dx), x.shape().rows(), x.shape().last(),
                               stream_of(ctx));
}

void layernorm_backward_weight(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& mean,
                               const Tensor& rstd, const Tensor& dgamma, const Tensor& dbeta) {
  require_f32("layernorm_backward_weight", dy), require_f32("layernorm_backward_weight", x);
  const std::size_t bytes = kd::layernorm_backward_weight_workspace_size(x.shape().rows(), x.shape().last());
  Tensor ws = scratch(ctx, bytes);
  kd::layernorm_backward_weight(f(dy), f(x), f(mean), f(rstd), f(dgamma), f(dbeta), x.shape().rows(),
                                x.shape().last(), ws.raw_data(), bytes, stream_of(ctx));
}

void adamw_update(const Context& ctx, const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const AdamWHyper& h) {
  require_f32("adamw_update", grad);
  kd::adamw_update(f(param), f(grad), f(m), f(v), param.numel(), h.lr, h.beta1, h.beta2, h.eps, h.weight_decay,
                   h.step, nullptr, stream_of(ctx));
}

constexpr Backend kCudaBackend{
    .name = "cuda",
    .gemm = gemm,
    .fill = fill,
    .copy = copy,
    .add = add,
    .add_inplace = add_inplace,
    .scale_inplace = scale_inplace,
    .axpy = axpy,
    .sum_squares = sum_squares,
    .sum_squares_many = cuda_detail::sum_squares_many,
    .bias_add_forward = bias_add_forward,
    .bias_backward = bias_backward,
    .gelu_forward = gelu_forward,
    .gelu_backward = gelu_backward,
    .relu_forward = nullptr,
    .relu_backward = nullptr,
    .softmax_forward = nullptr,
    .softmax_backward = nullptr,
    .layernorm_forward = layernorm_forward,
    .layernorm_backward_input = layernorm_backward_input,
    .layernorm_backward_weight = layernorm_backward_weight,
    .attention_forward = nullptr,
    .attention_backward = nullptr,
    .embedding_forward = cuda_detail::embedding_forward,
    .embedding_backward = cuda_detail::embedding_backward,
    .position_embedding_forward = cuda_detail::position_embedding_forward,
    .position_embedding_backward = cuda_detail::position_embedding_backward,
    .cross_entropy_forward = cuda_detail::cross_entropy_forward,
    .cross_entropy_backward = cuda_detail::cross_entropy_backward,
    .cross_entropy_shard_max = cuda_detail::cross_entropy_shard_max,
    .cross_entropy_shard_sum_exp_and_target = cuda_detail::cross_entropy_shard_sum_exp_and_target,
    .cross_entropy_loss = cuda_detail::cross_entropy_loss,
    .cross_entropy_shard_argmax = cuda_detail::cross_entropy_shard_argmax,
    .count_correct = cuda_detail::count_correct,
    .conv2d_forward = cuda_detail::conv2d_forward,
    .conv2d_backward_input = cuda_detail::conv2d_backward_input,
    .conv2d_backward_weight = cuda_detail::conv2d_backward_weight,
    .maxpool2d_forward = cuda_detail::maxpool2d_forward,
    .maxpool2d_backward = cuda_detail::maxpool2d_backward,
    .adamw_update = adamw_update,
    .sgd_update = nullptr,
    .check_device_status = cuda_detail::check_device_status,
};

}  // namespace

namespace cuda_detail {

kd::ConvContext& conv_context(const Context& ctx) { return resources_of(ctx).conv; }
DeviceStatus& device_status(const Context& ctx) { return resources_of(ctx).status; }

double sum_squares_many(const Context& ctx, std::span<const Tensor> xs) {
  std::vector<const float*> pointers;
  std::vector<std::int64_t> sizes;
  for (const Tensor& x : xs) {
    require_f32("sum_squares_many", x);
    pointers.push_back(f(x));
    sizes.push_back(x.numel());
  }
  const int count = static_cast<int>(xs.size());
  const std::size_t bytes = kd::sum_squares_many_workspace_size(sizes.data(), count);
  Tensor ws = scratch(ctx, bytes);
  Tensor out = scratch(ctx, sizeof(double));
  kd::sum_squares_many(pointers.data(), sizes.data(), count, static_cast<double*>(out.raw_data()), ws.raw_data(),
                       bytes, stream_of(ctx));
  double host = 0.0;  // the one read-back
  CLEAVE_CUDA_CHECK(cudaMemcpyAsync(&host, out.raw_data(), sizeof host, cudaMemcpyDeviceToHost, stream_of(ctx)));
  CLEAVE_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
  return host;
}

void check_device_status(const Context& ctx) { device_status(ctx).check(stream_of(ctx)); }

}  // namespace cuda_detail

const Backend& cuda_backend() { return kCudaBackend; }

std::unique_ptr<DeviceResources> make_cuda_resources(Device device) {
  CLEAVE_CHECK(device.is_cuda(), "make_cuda_resources: {} is not a cuda device", device.str());
  return std::make_unique<CudaResources>(device.index);
}

}  // namespace cleave::ops

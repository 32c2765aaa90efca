// The CUDA backend's table and its per-device resources, with the slots of the GEMM, element-wise, bias, GELU,
// ReLU, softmax, LayerNorm, causal attention and optimizer kernels; the loss, embedding, convolution and Llama
// (RMSNorm, SwiGLU, RoPE) families live in their own files (cuda_slots.hpp). Compiled only in CUDA builds (cmake/CleaveCuda.cmake); compiled,
// not yet run on a GPU (the seam parity tests, tests/gpu/ops, are waiting for one).
//
// Invariants: every slot launches on ctx.stream and returns without waiting, except the host values of ops.hpp
// (sum_squares, sum_squares_many, count_correct, check_device_status). Bad user data found by a kernel is
// recorded in the resources' DeviceStatus and thrown by check_device_status at the step's end, never by a
// synchronising check per call. Scratch comes from ctx.allocator, which must be the device's caching allocator;
// the cuBLASLt handle and its one workspace belong to the device's CudaResources, made under a guard for that
// device. Floating tensors are f32 or bf16 (floats.hpp: bf16 storage, f32 arithmetic and statistics, the CPU
// backend's contract) except where a slot says otherwise (sum_squares: f32); ops whose CUDA kernel does not
// exist yet would have null slots, so the seam says "<op> is not implemented on cuda:N".
#include <cuda_runtime_api.h>

#include <cmath>
#include <initializer_list>
#include <memory>
#include <span>
#include <vector>

#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/device.hpp"
#include "engine/cuda/stream.hpp"
#include "kernels/cuda/adamw.hpp"
#include "kernels/cuda/bias.hpp"
#include "kernels/cuda/copy_2d_plan.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/floats.hpp"
#include "kernels/cuda/gelu.hpp"
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/layernorm.hpp"
#include "kernels/cuda/relu.hpp"
#include "kernels/cuda/sgd.hpp"
#include "kernels/cuda/softmax.hpp"
#include "kernels/cuda/sum_squares_exact.hpp"
#include "kernels/cuda/sum_squares_many.hpp"
#include "kernels/ops/backend.hpp"
#include "kernels/ops/cuda/cuda_slots.hpp"

namespace cleave::ops {
namespace {

namespace kd = kernels::cuda;
using cuda_detail::float_type;
using cuda_detail::scratch;
using cuda_detail::stream_of;

// One device's handles: the cuBLASLt context (handle + plan cache) and the one GEMM workspace every GEMM of the
// device uses (gemm_workspace_size_max bytes, cudaMalloc'd once, outside the run's allocator and its memory
// plan). Made and destroyed with the device current. GEMMs are ordered on the stream that runs them: two streams
// running GEMMs at the same time need two resources objects (the workspace is not per stream).
class CudaResources final : public DeviceResources {
 public:
  explicit CudaResources(int device) : device_(device), conv_(device), status_(device) {
    cuda::DeviceGuard guard(device);
    gemm_ = std::make_unique<kd::GemmContext>();
    workspace_bytes_ = kd::gemm_workspace_size_max();
    CLEAVE_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
  }
  // Every handle goes with the device current: the members below are destroyed after this body's guard has
  // ended, so ConvContext and DeviceStatus take their own guards.
  ~CudaResources() override {
    cuda::DeviceGuard guard(device_, std::nothrow);
    if (workspace_ != nullptr) cudaFree(workspace_);
    gemm_.reset();
  }
  CudaResources(const CudaResources&) = delete;
  CudaResources& operator=(const CudaResources&) = delete;

  int device() const { return device_; }
  kd::GemmContext& gemm() { return *gemm_; }
  void* gemm_workspace() const { return workspace_; }
  std::size_t gemm_workspace_bytes() const { return workspace_bytes_; }
  kd::ConvContext& conv() { return conv_; }                    // cuDNN handle (made on first use), algorithms
  cuda_detail::DeviceStatus& status() { return status_; }     // deferred user-data errors

 private:
  int device_;
  std::unique_ptr<kd::GemmContext> gemm_;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;
  kd::ConvContext conv_;
  cuda_detail::DeviceStatus status_;
};

CudaResources& resources(const Context& ctx) {
  auto* r = dynamic_cast<CudaResources*>(ctx.resources);
  CLEAVE_CHECK(r != nullptr, "ops on {}: the context has no CUDA resources (Context::resources; create them "
               "with make_device_resources)", ctx.device.str());
  CLEAVE_CHECK(r->device() == ctx.device.index, "ops on {}: the context's CUDA resources belong to cuda:{} (make them "
               "with make_device_resources({}))", ctx.device.str(), r->device(), ctx.device.str());
  return *r;
}

// f32 or bf16 views of a floating tensor (undefined: null).
kd::ConstFloats in(const Tensor& t) {
  return t.defined() ? kd::ConstFloats(t.raw_data(), float_type(t)) : kd::ConstFloats();
}
kd::Floats out(const Tensor& t) { return t.defined() ? kd::Floats(t.raw_data(), float_type(t)) : kd::Floats(); }

// Kernels built on one GEMM operand type (attention) need every tensor in one dtype.
DType one_dtype(std::string_view op, const Context& ctx, std::initializer_list<const Tensor*> tensors) {
  const DType dtype = (*tensors.begin())->dtype();
  for (const Tensor* t : tensors) {
    CLEAVE_CHECK(t->dtype() == dtype, "{} on {} needs its tensors in one dtype, got {} and {} (cast with ops::copy)",
                 op, ctx.device.str(), dtype_name(dtype), dtype_name(t->dtype()));
  }
  return dtype;
}

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
  CudaResources& r = resources(ctx);
  kd::gemm(r.gemm(), args, r.gemm_workspace(), r.gemm_workspace_bytes(), stream_of(ctx));
}

void fill(const Context& ctx, const Tensor& t, float value) {
  if (value == 0.0f && !std::signbit(value)) {  // +0 is all-zero bits in f32 and bf16
    CLEAVE_CUDA_CHECK(cudaMemsetAsync(t.raw_data(), 0, t.nbytes(), stream_of(ctx)));
    return;
  }
  kd::fill(out(t), value, t.numel(), stream_of(ctx));
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

// cudaMemcpy2DAsync's limit on a pitch (bytes). Needs no CudaResources: the gradient bucketer's contexts have none.
std::int64_t max_pitch(Device device) {
  int pitch = 0;
  CLEAVE_CUDA_CHECK(cudaDeviceGetAttribute(&pitch, cudaDevAttrMaxPitch, device.index));
  return pitch;
}

// One block, one pitched copy, or one copy per row when a pitch is above the device's maximum (copy_2d_plan.hpp).
void copy_2d(const Context& ctx, const Tensor& src, const Tensor& dst, const Copy2d& s) {
  const auto elem = static_cast<std::int64_t>(dtype_size(src.dtype()));
  const std::int64_t width = s.cols * elem, src_pitch = s.src_stride * elem, dst_pitch = s.dst_stride * elem;
  char* to = static_cast<char*>(dst.raw_data()) + s.dst_offset * elem;
  const char* from = static_cast<const char*>(src.raw_data()) + s.src_offset * elem;
  const cudaStream_t stream = stream_of(ctx);
  switch (kd::copy_2d_method(s.rows, width, src_pitch, dst_pitch, max_pitch(ctx.device))) {
    case kd::Copy2dMethod::kOneBlock:
      CLEAVE_CUDA_CHECK(cudaMemcpyAsync(to, from, static_cast<std::size_t>(s.rows * width), cudaMemcpyDeviceToDevice,
                                        stream));
      return;
    case kd::Copy2dMethod::kPitched:
      CLEAVE_CUDA_CHECK(cudaMemcpy2DAsync(to, static_cast<std::size_t>(dst_pitch), from,
                                          static_cast<std::size_t>(src_pitch), static_cast<std::size_t>(width),
                                          static_cast<std::size_t>(s.rows), cudaMemcpyDeviceToDevice, stream));
      return;
    case kd::Copy2dMethod::kRowByRow:
      for (std::int64_t r = 0; r < s.rows; ++r) {
        CLEAVE_CUDA_CHECK(cudaMemcpyAsync(to + r * dst_pitch, from + r * src_pitch, static_cast<std::size_t>(width),
                                          cudaMemcpyDeviceToDevice, stream));
      }
      return;
  }
}

// One kernel launch for the whole block, converting on the way when the dtypes differ (f32 <-> bf16, checked).
void copy_3d(const Context& ctx, const Tensor& src, const Tensor& dst, const Copy3d& s) {
  const kd::CopyCast cast = src.dtype() == dst.dtype()       ? kd::CopyCast::kNone
                            : dst.dtype() == DType::kBF16 ? kd::CopyCast::kF32ToBf16
                                                            : kd::CopyCast::kBf16ToF32;
  const std::size_t src_elem = dtype_size(src.dtype()), dst_elem = dtype_size(dst.dtype());
  const char* from = static_cast<const char*>(src.raw_data()) + static_cast<std::size_t>(s.src_offset) * src_elem;
  char* to = static_cast<char*>(dst.raw_data()) + static_cast<std::size_t>(s.dst_offset) * dst_elem;
  kd::strided_copy(from, to, src_elem, cast,
                   {s.batches, s.rows, s.cols, s.src_batch_stride, s.src_row_stride, s.dst_batch_stride,
                    s.dst_row_stride},
                   stream_of(ctx));
}

void add(const Context& ctx, const Tensor& a, const Tensor& b, const Tensor& result) {
  kd::add(in(a), in(b), out(result), a.numel(), stream_of(ctx));
}

void add_inplace(const Context& ctx, const Tensor& y, const Tensor& x) {
  kd::add_inplace(out(y), in(x), y.numel(), stream_of(ctx));
}

void scale_inplace(const Context& ctx, const Tensor& y, float alpha) {
  kd::scale_inplace(out(y), alpha, y.numel(), stream_of(ctx));
}

void axpy(const Context& ctx, float alpha, const Tensor& x, const Tensor& y) {
  kd::axpy(alpha, in(x), out(y), y.numel(), stream_of(ctx));
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
  kd::bias_add_forward(out(y), in(bias), y.shape().rows(), y.shape().last(), stream_of(ctx));
}

void bias_backward(const Context& ctx, const Tensor& dy, const Tensor& dbias) {
  const std::size_t bytes = kd::bias_backward_workspace_size(dy.shape().rows(), dy.shape().last());
  Tensor ws = scratch(ctx, bytes);
  kd::bias_backward(in(dy), f(dbias), dy.shape().rows(), dy.shape().last(), ws.raw_data(), bytes, stream_of(ctx));
}

void gelu_forward(const Context& ctx, const Tensor& x, const Tensor& y) {
  kd::gelu_forward(in(x), out(y), x.numel(), stream_of(ctx));
}

void gelu_backward(const Context& ctx, const Tensor& x, const Tensor& dy, const Tensor& dx) {
  kd::gelu_backward(in(x), in(dy), out(dx), x.numel(), stream_of(ctx));
}

void relu_forward(const Context& ctx, const Tensor& x, const Tensor& y) {
  kd::relu_forward(in(x), out(y), x.numel(), stream_of(ctx));
}

void relu_backward(const Context& ctx, const Tensor& x, const Tensor& dy, const Tensor& dx) {
  kd::relu_backward(in(x), in(dy), out(dx), x.numel(), stream_of(ctx));
}

void softmax_forward(const Context& ctx, const Tensor& x, const Tensor& y) {
  kd::softmax_forward(in(x), out(y), x.shape().rows(), x.shape().last(), stream_of(ctx));
}

void softmax_backward(const Context& ctx, const Tensor& y, const Tensor& dy, const Tensor& dx) {
  kd::softmax_backward(in(y), in(dy), out(dx), y.shape().rows(), y.shape().last(), stream_of(ctx));
}

void layernorm_forward(const Context& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd, float eps) {
  kd::layernorm_forward(in(x), in(gamma), in(beta), out(y), f(mean), f(rstd), x.shape().rows(), x.shape().last(), eps,
                        stream_of(ctx));
}

void layernorm_backward_input(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                              const Tensor& mean, const Tensor& rstd, const Tensor& dx) {
  kd::layernorm_backward_input(in(dy), in(x), in(gamma), f(mean), f(rstd), out(dx), x.shape().rows(), x.shape().last(),
                               stream_of(ctx));
}

void layernorm_backward_weight(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& mean,
                               const Tensor& rstd, const Tensor& dgamma, const Tensor& dbeta) {
  const std::size_t bytes = kd::layernorm_backward_weight_workspace_size(x.shape().rows(), x.shape().last());
  Tensor ws = scratch(ctx, bytes);
  kd::layernorm_backward_weight(in(dy), in(x), f(mean), f(rstd), f(dgamma), f(dbeta), x.shape().rows(),
                                x.shape().last(), ws.raw_data(), bytes, stream_of(ctx));
}

void adamw_update(const Context& ctx, const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const AdamWHyper& h) {
  kd::adamw_update(f(param), in(grad), f(m), f(v), param.numel(), h.lr, h.beta1, h.beta2, h.eps, h.weight_decay,
                   h.step, nullptr, stream_of(ctx));
}

void sgd_update(const Context& ctx, const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                const SgdHyper& h) {
  kd::sgd_update(f(param), in(grad), h.momentum != 0.0f ? f(momentum_buf) : nullptr, param.numel(), h.lr, h.momentum,
                 h.weight_decay, h.nesterov, h.first_step, stream_of(ctx));
}

// cudaMemcpyDefault: unified addressing tells CUDA which side each pointer is on (H2D, D2H, D2D).
void transfer(const Context& ctx, const Tensor& src, const Tensor& dst) {
  if (src.nbytes() == 0) return;
  CLEAVE_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.nbytes(), cudaMemcpyDefault, stream_of(ctx)));
}

void synchronize(const Context& ctx) { CLEAVE_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx))); }

constexpr Backend kCudaBackend{
    .name = "cuda",
    .gemm = gemm,
    .grouped_gemm = detail::grouped_gemm_each,  // no grouped CUDA kernel: one launch per group
    .fill = fill,
    .copy = copy,
    .copy_2d = copy_2d,
    .copy_3d = copy_3d,
    .add = add,
    .add_inplace = add_inplace,
    .scale_inplace = scale_inplace,
    .scale_inplace_many = detail::scale_inplace_each,  // no multi-tensor CUDA kernel yet: one launch per tensor
    .axpy = axpy,
    .sum_squares = sum_squares,
    .sum_squares_many = cuda_detail::sum_squares_many,
    .sum_squares_exact = cuda_detail::sum_squares_exact,
    .bias_add_forward = bias_add_forward,
    .bias_backward = bias_backward,
    .gelu_forward = gelu_forward,
    .gelu_backward = gelu_backward,
    .relu_forward = relu_forward,
    .relu_backward = relu_backward,
    .softmax_forward = softmax_forward,
    .softmax_backward = softmax_backward,
    .layernorm_forward = layernorm_forward,
    .layernorm_backward_input = layernorm_backward_input,
    .layernorm_backward_weight = layernorm_backward_weight,
    .attention_forward = cuda_detail::attention_forward,
    .attention_backward = cuda_detail::attention_backward,
    .attention_merge = cuda_detail::attention_merge,
    .rmsnorm_forward = cuda_detail::rmsnorm_forward,
    .rmsnorm_backward_input = cuda_detail::rmsnorm_backward_input,
    .rmsnorm_backward_weight = cuda_detail::rmsnorm_backward_weight,
    .add_rmsnorm_forward = cuda_detail::add_rmsnorm_forward,
    .add_rmsnorm_backward_input = cuda_detail::add_rmsnorm_backward_input,
    .swiglu_forward = cuda_detail::swiglu_forward,
    .swiglu_backward = cuda_detail::swiglu_backward,
    .rope_pack_qkv = cuda_detail::rope_pack_qkv,
    .rope_pack_qkv_backward = cuda_detail::rope_pack_qkv_backward,
    .embedding_forward = cuda_detail::embedding_forward,
    .embedding_backward = cuda_detail::embedding_backward,
    .moe_gather = cuda_detail::moe_gather,
    .moe_combine = cuda_detail::moe_combine,
    .moe_combine_weight_grad = cuda_detail::moe_combine_weight_grad,
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
    .sgd_update = sgd_update,
    .adamw_update_many = detail::adamw_update_each,  // no multi-tensor CUDA kernel yet: one launch per tensor
    .sgd_update_many = detail::sgd_update_each,
    .check_device_status = cuda_detail::check_device_status,
    .transfer = transfer,
    .synchronize = synchronize,
};

}  // namespace

namespace cuda_detail {

kd::ConvContext& conv_context(const Context& ctx) { return resources(ctx).conv(); }
DeviceStatus& device_status(const Context& ctx) { return resources(ctx).status(); }

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

kernels::ExactSquareSum sum_squares_exact(const Context& ctx, std::span<const Tensor> xs) {
  Tensor out = scratch(ctx, sizeof(kernels::ExactSquareSum));
  auto* acc = static_cast<kernels::ExactSquareSum*>(out.raw_data());
  CLEAVE_CUDA_CHECK(cudaMemsetAsync(acc, 0, sizeof(kernels::ExactSquareSum), stream_of(ctx)));
  for (const Tensor& x : xs) {
    require_f32("sum_squares_exact", x);
    kd::sum_squares_exact(f(x), x.numel(), acc, stream_of(ctx));
  }
  kernels::ExactSquareSum host;  // the one read-back
  CLEAVE_CUDA_CHECK(cudaMemcpyAsync(&host, acc, sizeof host, cudaMemcpyDeviceToHost, stream_of(ctx)));
  CLEAVE_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
  host.normalize();
  return host;
}

void check_device_status(const Context& ctx) { device_status(ctx).check(stream_of(ctx)); }

}  // namespace cuda_detail

const Backend& cuda_backend() { return kCudaBackend; }

std::unique_ptr<DeviceResources> make_cuda_resources(Device device) {
  CLEAVE_CHECK(device.is_cuda(), "make_cuda_resources: {} is not a cuda device", device.str());
  const int count = cuda::device_count();
  CLEAVE_CHECK(device.index >= 0 && device.index < count, "make_cuda_resources: {} does not exist ({} CUDA devices "
               "visible)", device.str(), count);
  return std::make_unique<CudaResources>(device.index);
}

}  // namespace cleave::ops

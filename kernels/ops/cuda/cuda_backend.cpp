// The CUDA backend's slots: the kernels of kernels/cuda (cuBLASLt GEMM, element-wise, bias, GELU, LayerNorm,
// embeddings, AdamW) behind the seam. Compiled only in CUDA builds (cmake/CleaveCuda.cmake); NOT yet run on a
// GPU (no device was lent when it was written; issue "Training on GPUs" carries the bring-up).
//
// Invariants: every slot launches on ctx.stream and returns without waiting, except sum_squares (a host value
// by contract) and the token-id check after embedding_forward (see below). Scratch comes from ctx.allocator,
// which must be the device's caching allocator. Ops whose CUDA kernel does not exist yet (ReLU, softmax,
// attention, cross-entropy, conv2d, max pooling, SGD) have null slots, so the seam says "<op> is not
// implemented on cuda:N"; an f32-only kernel given bf16 tensors refuses the same way, naming the dtype.
#include <cuda_runtime_api.h>

#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/stream.hpp"
#include "kernels/cuda/adamw.hpp"
#include "kernels/cuda/bias.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/embedding.hpp"
#include "kernels/cuda/gelu.hpp"
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/index_status.hpp"
#include "kernels/cuda/layernorm.hpp"
#include "kernels/ops/backend.hpp"

namespace cleave::ops {
namespace {

namespace kd = kernels::cuda;

class CudaResources final : public DeviceResources {
 public:
  kd::GemmContext gemm;
};

kd::GemmContext& gemm_context(const Context& ctx) {
  auto* resources = dynamic_cast<CudaResources*>(ctx.resources);
  CLEAVE_CHECK(resources != nullptr, "ops on {}: the context has no CUDA resources (Context::resources; create them "
               "with make_device_resources)", ctx.device.str());
  return resources->gemm;
}

cudaStream_t stream_of(const Context& ctx) { return cuda::native_stream(*ctx.stream); }

Tensor scratch(const Context& ctx, std::size_t bytes) {
  const auto words = static_cast<std::int64_t>((bytes + 7) / 8);
  return Tensor::empty(Shape{words > 0 ? words : 1}, DType::kI64, MemoryCategory::kWorkspace, *ctx.allocator);
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

void require_whole_table(std::string_view op, const Context& ctx, const VocabRange& range) {
  CLEAVE_CHECK(range.first == 0 && range.valid == range.vocab,
               "{} over a vocabulary shard is not implemented on {} yet (only the whole table)", op, ctx.device.str());
}

void embedding_forward(const Context& ctx, const Tensor& ids, const Tensor& table, const Tensor& out,
                       const VocabRange& range) {
  require_whole_table("embedding_forward", ctx, range);
  require_f32("embedding_forward", table), require_f32("embedding_forward", out);
  Tensor status = scratch(ctx, sizeof(std::uint32_t));
  auto* bad = static_cast<std::uint32_t*>(status.raw_data());
  kd::reset_index_status(bad, stream_of(ctx));
  kd::embedding_forward(ids.data<std::int32_t>(), f(table), f(out), bad, ids.numel(), table.dim(1), range.vocab,
                        stream_of(ctx));
  // The seam promises a checked id; until the check moves to the step's loss read-back (GPU bring-up), it
  // waits here.
  kd::check_ids_status(bad, ids.data<std::int32_t>(), range.vocab, stream_of(ctx));
}

void embedding_backward(const Context& ctx, const Tensor& ids, const Tensor& dout, const Tensor& dtable,
                        const VocabRange& range) {
  require_whole_table("embedding_backward", ctx, range);
  require_f32("embedding_backward", dout);
  const std::size_t bytes = kd::embedding_backward_workspace_size(ids.numel(), range.vocab);
  Tensor ws = scratch(ctx, bytes);
  kd::embedding_backward(ids.data<std::int32_t>(), f(dout), f(dtable), ids.numel(), dtable.dim(1), range.vocab,
                         ws.raw_data(), bytes, stream_of(ctx));
}

void position_embedding_forward(const Context& ctx, const Tensor& x, const Tensor& pos) {
  require_f32("position_embedding_forward", x), require_f32("position_embedding_forward", pos);
  kd::position_embedding_forward(f(x), f(pos), x.dim(0), x.dim(1), x.dim(2), stream_of(ctx));
}

void position_embedding_backward(const Context& ctx, const Tensor& dx, const Tensor& dpos) {
  require_f32("position_embedding_backward", dx);
  kd::position_embedding_backward(f(dx), f(dpos), dx.dim(0), dx.dim(1), dx.dim(2), stream_of(ctx));
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
    .embedding_forward = embedding_forward,
    .embedding_backward = embedding_backward,
    .position_embedding_forward = position_embedding_forward,
    .position_embedding_backward = position_embedding_backward,
    .cross_entropy_forward = nullptr,
    .cross_entropy_backward = nullptr,
    .cross_entropy_shard_max = nullptr,
    .cross_entropy_shard_sum_exp_and_target = nullptr,
    .cross_entropy_loss = nullptr,
    .cross_entropy_shard_argmax = nullptr,
    .count_correct = nullptr,
    .conv2d_forward = nullptr,
    .conv2d_backward_input = nullptr,
    .conv2d_backward_weight = nullptr,
    .maxpool2d_forward = nullptr,
    .maxpool2d_backward = nullptr,
    .adamw_update = adamw_update,
    .sgd_update = nullptr,
};

}  // namespace

const Backend& cuda_backend() { return kCudaBackend; }

std::unique_ptr<DeviceResources> make_cuda_resources(Device device) {
  CLEAVE_CHECK(device.is_cuda(), "make_cuda_resources: {} is not a cuda device", device.str());
  return std::make_unique<CudaResources>();
}

}  // namespace cleave::ops

// The CPU backend's table: every slot of the seam (backend.hpp), filled from the family files of this folder
// (cpu_slots.hpp lists them), the runtime slots that have nothing to do on a CPU, and the CPU's thread and BLAS
// settings (ops.hpp). The CPU backend is complete (no null slot) and is the numerical reference: every slot runs
// the f32 kernels of kernels/cpu, bf16 tensors widened and narrowed at the edges (cpu_f32_view.hpp), except the
// GEMMs on a library with bf16 kernels (cpu_gemm.cpp).
#include <cstring>
#include <string>

#include "kernels/cpu/blas_runtime.hpp"
#include "kernels/ops/backend.hpp"
#include "kernels/ops/cpu/cpu_slots.hpp"

namespace cleave::ops {
namespace cpu_detail {
namespace {

// The CPU kernels throw on bad user data at once: nothing is ever deferred.
void check_device_status(const Context&) {}

// Both sides are host memory here (the op checked they are on the CPU).
void transfer(const Context&, const Tensor& src, const Tensor& dst) {
  if (src.raw_data() != dst.raw_data() && src.nbytes() > 0) std::memcpy(dst.raw_data(), src.raw_data(), src.nbytes());
}

void synchronize(const Context&) {}  // CPU work has finished when its call returns

}  // namespace

// The slots in backend.hpp's order; each family's slots are defined in the file cpu_slots.hpp names.
constexpr Backend kCpuBackend{
    .name = "cpu",
    .gemm = gemm,
    .grouped_gemm = grouped_gemm,
    .fill = fill,
    .copy = copy,
    .copy_2d = copy_2d,
    .copy_3d = copy_3d,
    .add = add,
    .add_inplace = add_inplace,
    .scale_inplace = scale_inplace,
    .scale_inplace_many = scale_inplace_many,
    .axpy = axpy,
    .sum_squares = sum_squares,
    .sum_squares_many = sum_squares_many,
    .sum_squares_exact = sum_squares_exact,
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
    .attention_forward = attention_forward,
    .attention_backward = attention_backward,
    .attention_merge = attention_merge,
    .rmsnorm_forward = rmsnorm_forward,
    .rmsnorm_backward_input = rmsnorm_backward_input,
    .rmsnorm_backward_weight = rmsnorm_backward_weight,
    .add_rmsnorm_forward = add_rmsnorm_forward,
    .add_rmsnorm_backward_input = add_rmsnorm_backward_input,
    .swiglu_forward = swiglu_forward,
    .swiglu_backward = swiglu_backward,
    .rope_pack_qkv = rope_pack_qkv,
    .rope_pack_qkv_backward = rope_pack_qkv_backward,
    .embedding_forward = embedding_forward,
    .embedding_backward = embedding_backward,
    .moe_gather = moe_gather,
    .moe_combine = moe_combine,
    .moe_combine_weight_grad = moe_combine_weight_grad,
    .position_embedding_forward = position_embedding_forward,
    .position_embedding_backward = position_embedding_backward,
    .cross_entropy_forward = cross_entropy_forward,
    .cross_entropy_backward = cross_entropy_backward,
    .cross_entropy_shard_max = cross_entropy_shard_max,
    .cross_entropy_shard_sum_exp_and_target = cross_entropy_shard_sum_exp_and_target,
    .cross_entropy_loss = cross_entropy_loss,
    .cross_entropy_shard_argmax = cross_entropy_shard_argmax,
    .count_correct = count_correct,
    .conv2d_forward = conv2d_forward,
    .conv2d_backward_input = conv2d_backward_input,
    .conv2d_backward_weight = conv2d_backward_weight,
    .maxpool2d_forward = maxpool2d_forward,
    .maxpool2d_backward = maxpool2d_backward,
    .adamw_update = adamw_update,
    .sgd_update = sgd_update,
    .adamw_update_many = adamw_update_many,
    .sgd_update_many = sgd_update_many,
    .check_device_status = check_device_status,
    .transfer = transfer,
    .synchronize = synchronize,
};

}  // namespace cpu_detail

const Backend& cpu_backend() { return cpu_detail::kCpuBackend; }

namespace kc = kernels::cpu;

void configure_cpu_threads(int threads) { kc::configure_kernel_threads(threads); }

int cpu_threads() { return kc::kernel_threads(); }

std::string cpu_blas_description() { return kc::blas_config() + " (core " + kc::blas_core_name() + ")"; }

}  // namespace cleave::ops

// The seam's dispatch: arguments are checked once for every backend (device, dtype, shape errors name the op
// and the tensors), and a device whose backend lacks an op is refused by name, never run on the CPU.
#include <gtest/gtest.h>

#include "cleave/config.hpp"
#include "engine/core/error.hpp"
#include "kernels/ops/dispatch.hpp"
#include "kernels/ops/ops.hpp"
#include "unit/ops/ops_test_util.hpp"

namespace cleave::ops::dispatch_test {
namespace {

using test::message_of;

TEST(OpsDispatch, CpuBackendFillsEverySlot) {
  const Backend& cpu = cpu_backend();
  // Every slot is a pointer; walk the table as such (all slots share a size) and count the null ones.
  const auto* first = reinterpret_cast<const void* const*>(&cpu.gemm);
  const std::size_t slots = (sizeof(Backend) - offsetof(Backend, gemm)) / sizeof(void*);
  EXPECT_GT(slots, 35u);
  for (std::size_t i = 0; i < slots; ++i) EXPECT_NE(first[i], nullptr) << "cpu slot " << i;
}

#if CLEAVE_WITH_CUDA
// Every op of the seam has a CUDA kernel (compiled, not run here: tests/gpu/ops compares each with the CPU).
TEST(OpsDispatch, CudaBackendFillsEverySlot) {
  const Backend& cuda = cuda_backend();
  const auto* first = reinterpret_cast<const void* const*>(&cuda.gemm);
  const std::size_t slots = (sizeof(Backend) - offsetof(Backend, gemm)) / sizeof(void*);
  for (std::size_t i = 0; i < slots; ++i) EXPECT_NE(first[i], nullptr) << "cuda slot " << i;
  EXPECT_NE(cuda.rmsnorm_forward, nullptr);
  EXPECT_NE(cuda.rope_pack_qkv_backward, nullptr);
}
#endif

TEST(OpsDispatch, MissingKernelIsNamedNotFallenBack) {
  Context cuda;
  cuda.device = Device::cuda(0);
#if CLEAVE_WITH_CUDA
  // A null slot is this error (slot_of throws it; the CUDA backend may have every slot filled, so the message is
  // checked directly): it names the op and the device.
  const std::string msg =
      message_of([&] { detail::throw_not_implemented("relu_forward", cuda.device, cuda_backend().name); });
  EXPECT_NE(msg.find("relu_forward is not implemented on cuda:0"), std::string::npos) << msg;
  // An op it has resolves to its slot.
  EXPECT_EQ(detail::slot_of(cuda, &Backend::gemm, "gemm"), cuda_backend().gemm);
  EXPECT_NE(cuda_backend().gemm, nullptr);
#else
  const std::string msg = message_of([&] { (void)backend_for(cuda.device); });
  EXPECT_NE(msg.find("built without CUDA"), std::string::npos) << msg;
#endif
}

TEST(OpsDispatch, TensorsOnAnotherDeviceAreRefusedBeforeAnyKernel) {
  Context cuda;
  cuda.device = Device::cuda(0);
  const Tensor x = Tensor::zeros({4}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  const std::string msg = message_of([&] { gelu_forward(cuda, x, x); });
  EXPECT_NE(msg.find("gelu_forward: x [4] is on cpu, but the op runs on cuda:0"), std::string::npos) << msg;
}

TEST(OpsDispatch, ShapeAndDtypeErrorsNameTheOpAndTensors) {
  const Context ctx;
  const Tensor a = Tensor::zeros({3, 5}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  const Tensor b = Tensor::zeros({4, 2}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  const Tensor c = Tensor::zeros({3, 2}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  std::string msg = message_of([&] { gemm(ctx, a, b, c); });
  EXPECT_NE(msg.find("gemm: op(A) is 3x5 but op(B) is 4x2"), std::string::npos) << msg;
  const Tensor ids = Tensor::zeros({2, 3}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  const Tensor table = Tensor::zeros({10, 4}, DType::kF32, MemoryCategory::kParameters, cpu_allocator());
  const Tensor out = Tensor::zeros({2, 3, 4}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  msg = message_of([&] { embedding_forward(ctx, ids, table, out, {0, 10, 10}); });
  EXPECT_NE(msg.find("embedding_forward: ids [2,3] is f32; expected i32"), std::string::npos) << msg;
}

}  // namespace
}  // namespace cleave::ops::dispatch_test

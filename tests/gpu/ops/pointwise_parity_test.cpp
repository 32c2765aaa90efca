// Seam parity of the element-wise slots (fill, add, add_inplace, scale_inplace(_many), axpy, copy_2d, copy_3d), bias
// forward/backward, GELU and ReLU on cuda:0 against the CPU backend, f32 and bf16 (and one mixed-dtype add), on odd
// sizes.
//
// Tolerances (relative to each element plus the tensor's scale, parity_util.hpp):
//  - 0 (equal values) where both backends do the same single f32 operation on the same widened inputs and round
//    once: fill, add, add_inplace, scale_inplace(_many), bias_add_forward, ReLU; copy_2d moves bytes; copy_3d
//    moves bytes or rounds (widens) each element once, as copy.
//  - axpy: f32 1e-6 (nvcc may contract y + alpha * x into an FMA: one f32 ulp); bf16 4e-3 (that ulp may flip
//    the bf16 rounding: one bf16 ulp, 2^-8 relative).
//  - GELU: f32 1e-5 (CUDA's tanhf is within 2 ulp, not the CPU's); bf16 8e-3 (one bf16 ulp either way).
//  - bias_backward: dbias is f32 in both cases; 1e-5, the column sums run in another order (up to 300 rows).
#include <vector>

#include "tests/gpu/ops/parity_util.hpp"

namespace cleave::testing::pointwise_parity_test {
namespace {

const Shape kShapes[] = {Shape{1, 1}, Shape{7, 33}, Shape{3, 5, 129}, Shape{300, 17}};
const DType kDtypes[] = {DType::kF32, DType::kBF16};

std::string label(std::string_view op, const Shape& shape, DType dtype) {
  return std::string(op) + " " + shape.str() + " " + std::string(dtype_name(dtype));
}

double one_ulp(DType dtype, double f32_tol) { return dtype == DType::kBF16 ? 4e-3 : f32_tol; }

using PointwiseParity = OpsParity;

TEST_F(PointwiseParity, FillWritesAnyValueInAnyDtype) {
  for (DType dtype : kDtypes) {
    for (const Shape& shape : kShapes) {
      for (float value : {0.37f, -1.5f}) {
        Tensor want = empty_cpu(shape, dtype);
        ops::fill(cpu(), want, value);
        Tensor got = poisoned_gpu(shape, dtype);
        ops::fill(gpu(), got, value);
        expect_close(want, got, 0.0, label("fill " + std::to_string(value), shape, dtype));
      }
      // Zero: every element +0 (the all-zero reference expect_close refuses is checked by hand).
      Tensor zero = poisoned_gpu(shape, dtype);
      ops::fill(gpu(), zero, 0.0f);
      std::int64_t nonzero = 0;
      for (float v : to_cpu(zero).to_floats()) nonzero += !(v == 0.0f && !std::signbit(v));
      EXPECT_EQ(nonzero, 0) << label("fill 0", shape, dtype);
    }
  }
}

TEST_F(PointwiseParity, AddAndInPlaceForms) {
  for (DType dtype : kDtypes) {
    for (const Shape& shape : kShapes) {
      const Tensor a = random(shape, dtype), b = random(shape, dtype);
      Tensor sum = empty_cpu(shape, dtype);
      ops::add(cpu(), a, b, sum);
      Tensor gpu_sum = poisoned_gpu(shape, dtype);
      ops::add(gpu(), to_gpu(a), to_gpu(b), gpu_sum);
      expect_close(sum, gpu_sum, 0.0, label("add", shape, dtype));

      Tensor y = random(shape, dtype);
      Tensor gpu_y = to_gpu(y);
      ops::add_inplace(cpu(), y, a);
      ops::add_inplace(gpu(), gpu_y, to_gpu(a));
      expect_close(y, gpu_y, 0.0, label("add_inplace", shape, dtype));

      ops::scale_inplace(cpu(), y, -0.73f);
      ops::scale_inplace(gpu(), gpu_y, -0.73f);
      expect_close(y, gpu_y, 0.0, label("scale_inplace", shape, dtype));

      ops::axpy(cpu(), 1.37f, b, y);
      ops::axpy(gpu(), 1.37f, to_gpu(b), gpu_y);
      expect_close(y, gpu_y, one_ulp(dtype, 1e-6), label("axpy", shape, dtype));
    }
  }
  // Mixed storage: a bf16 + b f32 -> out bf16 (each operand read in its own dtype).
  const Shape shape{5, 37};
  const Tensor a = random(shape, DType::kBF16), b = random(shape, DType::kF32);
  Tensor sum = empty_cpu(shape, DType::kBF16);
  ops::add(cpu(), a, b, sum);
  Tensor gpu_sum = poisoned_gpu(shape, DType::kBF16);
  ops::add(gpu(), to_gpu(a), to_gpu(b), gpu_sum);
  expect_close(sum, gpu_sum, 0.0, "add bf16 + f32 -> bf16");
}

// scale_inplace_many (gradient clipping's multi-tensor slot: the CPU's one OpenMP team against CUDA's launch per
// tensor) over every shape of both dtypes in one call, bit for bit.
TEST_F(PointwiseParity, ScaleInplaceManyIsScaleInplaceOnEach) {
  std::vector<Tensor> ys, gpu_ys;
  for (DType dtype : kDtypes) {
    for (const Shape& shape : kShapes) {
      ys.push_back(random(shape, dtype));
      gpu_ys.push_back(to_gpu(ys.back()));
    }
  }
  ops::scale_inplace_many(cpu(), ys, 0.37f);
  ops::scale_inplace_many(gpu(), gpu_ys, 0.37f);
  for (std::size_t i = 0; i < ys.size(); ++i) {
    expect_close(ys[i], gpu_ys[i], 0.0, label("scale_inplace_many", ys[i].shape(), ys[i].dtype()));
  }
}

// copy_2d (cudaMemcpy2DAsync; context parallelism's head-block packing) against the CPU's row memcpy, bit for bit,
// onto a destination that already holds values (so an element written out of place or a row missed shows): the
// ring's take of a head block of some tokens, Ulysses' scatter of a share back into the whole row, one row, and
// odd widths in bf16 (rows of 14 bytes at 2-byte offsets), contiguous rows (one plain copy), from a [2, 7, 40]
// source.
TEST_F(PointwiseParity, Copy2dMovesTheBlockAndNothingElse) {
  struct Case {
    const char* what;
    ops::Copy2d shape;
    std::int64_t dst_numel;
  };
  const Case cases[] = {
      {"ring take: tokens 2..6, columns 8..19 of sample 1", {5, 12, (1 * 7 + 2) * 40 + 8, 40, 1 * 5 * 12, 12}, 120},
      {"ulysses scatter: 14 rows of 6 at column 6 into a row of 40", {14, 6, 6, 12, 10, 40}, 560},
      {"one row", {1, 17, 5, 17, 3, 17}, 20},
      {"odd width and offsets", {9, 7, 3, 31, 1, 9}, 82},
      {"contiguous rows (one block)", {6, 10, 7, 10, 2, 10}, 70},
  };
  for (DType dtype : kDtypes) {
    for (const Case& c : cases) {
      const Tensor src = random(Shape{2, 7, 40}, dtype);
      Tensor dst = random(Shape{c.dst_numel}, dtype);
      Tensor gpu_dst = to_gpu(dst);
      ops::copy_2d(cpu(), src, dst, c.shape);
      ops::copy_2d(gpu(), to_gpu(src), gpu_dst, c.shape);
      expect_close(dst, gpu_dst, 0.0, std::string("copy_2d ") + c.what + " " + std::string(dtype_name(dtype)));
    }
  }
}

// copy_2d with a source pitch above the device's maximum (cudaDevAttrMaxPitch, 2^31 - 1 bytes: cudaMemcpy2DAsync
// refuses it; the Ulysses exchange reaches it at long context): the slot copies row by row (copy_2d_plan.hpp). Two
// rows of 33 f32 values 2^31 + 64 bytes apart (a 2 GiB source, zeroed, the rows written) into a contiguous [2, 33].
TEST_F(PointwiseParity, Copy2dAbove2GiBPitchGoesRowByRow) {
  const std::int64_t cols = 33, pitch = ((std::int64_t{1} << 31) + 64) / 4;
  const Tensor rows = random(Shape{2, cols}, DType::kF32);
  Tensor src = Tensor::empty(Shape{pitch + cols}, DType::kF32, MemoryCategory::kActivations, *gpu().allocator);
  ops::fill(gpu(), src, 0.0f);
  for (std::int64_t r = 0; r < 2; ++r) {
    ops::copy(gpu(), to_gpu(rows.slice(r, r + 1).view(Shape{cols})), src.slice(r * pitch, r * pitch + cols));
  }
  Tensor dst = poisoned_gpu(Shape{2, cols}, DType::kF32);
  ops::copy_2d(gpu(), src, dst, {2, cols, 0, pitch, 0, cols});
  expect_close(rows, dst, 0.0, "copy_2d with a 2 GiB source pitch");
}

// copy_3d (one strided_copy_kernel launch; ring attention's chunk of every sample, widened or rounded on the way)
// against the CPU's rows, bit for bit, in one dtype and converting f32 <-> bf16, onto a destination that already
// holds values: the ring's take of a column block of tokens 3..5 of 3 samples [3, 6, 40] into [3, 3, 12], its put
// back, B 1 with an odd chunk, and a source batch stride of 0.
TEST_F(PointwiseParity, Copy3dMovesAndConvertsTheBlockAndNothingElse) {
  struct Case {
    const char* what;
    Shape src, dst;
    ops::Copy3d shape;
  };
  const Case cases[] = {
      {"ring take: B 3, tokens 3..5, columns 8..19", Shape{3, 6, 40}, Shape{3, 3, 12},
       {3, 3, 12, 3 * 40 + 8, 6 * 40, 40, 0, 3 * 12, 12}},
      {"ring put: B 3, tokens 3..5, columns 8..19", Shape{3, 3, 12}, Shape{3, 6, 40},
       {3, 3, 12, 0, 3 * 12, 12, 3 * 40 + 8, 6 * 40, 40}},
      {"B 1, 5 tokens of 7 odd columns", Shape{1, 10, 21}, Shape{1, 5, 7}, {1, 5, 7, 5 * 21 + 13, 210, 21, 0, 35, 7}},
      {"source batch stride 0", Shape{40}, Shape{3, 1, 11}, {3, 1, 11, 5, 0, 11, 0, 11, 11}},
  };
  const DType pairs[][2] = {{DType::kF32, DType::kF32},
                            {DType::kBF16, DType::kBF16},
                            {DType::kBF16, DType::kF32},
                            {DType::kF32, DType::kBF16}};
  for (const auto& pair : pairs) {
    for (const Case& c : cases) {
      const Tensor src = random(c.src, pair[0]);
      Tensor dst = random(c.dst, pair[1]);
      Tensor gpu_dst = to_gpu(dst);
      ops::copy_3d(cpu(), src, dst, c.shape);
      ops::copy_3d(gpu(), to_gpu(src), gpu_dst, c.shape);
      expect_close(dst, gpu_dst, 0.0,
                   std::string("copy_3d ") + c.what + " " + std::string(dtype_name(pair[0])) + " -> " +
                       std::string(dtype_name(pair[1])));
    }
  }
}

TEST_F(PointwiseParity, BiasForwardAndBackward) {
  for (DType dtype : kDtypes) {
    for (const Shape& shape : kShapes) {
      const std::int64_t cols = shape.last();
      Tensor y = random(shape, dtype);
      const Tensor bias = random(Shape{cols}, dtype);
      Tensor gpu_y = to_gpu(y);
      ops::bias_add_forward(cpu(), y, bias);
      ops::bias_add_forward(gpu(), gpu_y, to_gpu(bias));
      expect_close(y, gpu_y, 0.0, label("bias_add_forward", shape, dtype));

      const Tensor dy = random(shape, dtype);
      Tensor dbias = random(Shape{cols}, DType::kF32);  // accumulated into (+=)
      Tensor gpu_dbias = to_gpu(dbias);
      ops::bias_backward(cpu(), dy, dbias);
      ops::bias_backward(gpu(), to_gpu(dy), gpu_dbias);
      expect_close(dbias, gpu_dbias, 1e-5, label("bias_backward", shape, dtype));
    }
  }
}

TEST_F(PointwiseParity, GeluAndRelu) {
  for (DType dtype : kDtypes) {
    for (const Shape& shape : kShapes) {
      const Tensor x = random(shape, dtype, -4.0f, 4.0f), dy = random(shape, dtype);
      const double gelu_tol = dtype == DType::kBF16 ? 8e-3 : 1e-5;
      Tensor y = empty_cpu(shape, dtype), dx = empty_cpu(shape, dtype);
      Tensor gpu_y = poisoned_gpu(shape, dtype), gpu_dx = poisoned_gpu(shape, dtype);
      const Tensor gpu_x = to_gpu(x), gpu_dy = to_gpu(dy);

      ops::gelu_forward(cpu(), x, y);
      ops::gelu_forward(gpu(), gpu_x, gpu_y);
      expect_close(y, gpu_y, gelu_tol, label("gelu_forward", shape, dtype));
      ops::gelu_backward(cpu(), x, dy, dx);
      ops::gelu_backward(gpu(), gpu_x, gpu_dy, gpu_dx);
      expect_close(dx, gpu_dx, gelu_tol, label("gelu_backward", shape, dtype));

      // ReLU's input with element 0 made positive, so a one-element reference cannot be all zero.
      std::vector<float> values = x.to_floats();
      values[0] = std::fabs(values[0]) + 0.5f;
      const Tensor x_relu = from_floats(values, shape, dtype), gpu_x_relu = to_gpu(x_relu);
      ops::relu_forward(cpu(), x_relu, y);
      ops::relu_forward(gpu(), gpu_x_relu, gpu_y);
      expect_close(y, gpu_y, 0.0, label("relu_forward", shape, dtype));
      ops::relu_backward(cpu(), x_relu, dy, dx);
      ops::relu_backward(gpu(), gpu_x_relu, gpu_dy, gpu_dx);
      expect_close(dx, gpu_dx, 0.0, label("relu_backward", shape, dtype));
    }
  }
}

}  // namespace
}  // namespace cleave::testing::pointwise_parity_test

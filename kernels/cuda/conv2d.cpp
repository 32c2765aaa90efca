// cuDNN convolution (conv2d.hpp). Descriptors are built per call (host-only, microseconds); the algorithm
// choice and the handle persist in the ConvContext.
#include "kernels/cuda/conv2d.hpp"

#include <array>
#include <map>
#include <tuple>

#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/cudnn_check.hpp"
#include "engine/cuda/device.hpp"

namespace cleave::kernels::cuda {

struct ConvContext::Impl {
  int device = 0;
  cudnnHandle_t handle = nullptr;
  struct Choice {
    int algorithm = 0;
    std::size_t workspace = 0;
  };
  using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;
  std::map<Key, Choice> choices;

  cudnnHandle_t get() {
    if (handle == nullptr) {
      ::cleave::cuda::DeviceGuard guard(device);
      CLEAVE_CUDNN_CHECK(cudnnCreate(&handle));
    }
    return handle;
  }
};

ConvContext::ConvContext(int device) : impl_(std::make_unique<Impl>()) { impl_->device = device; }

ConvContext::~ConvContext() {
  if (impl_->handle == nullptr) return;
  // With the handle's device current, whatever the caller's is (cuDNN releases its device resources there).
  ::cleave::cuda::DeviceGuard guard(impl_->device, std::nothrow);
  cudnnDestroy(impl_->handle);  // not checked: a destructor must not throw
}


namespace {

int to_int(int64_t v) { return static_cast<int>(v); }

// The four descriptors of one convolution, destroyed with the object.
class Descriptors {
 public:
  explicit Descriptors(const Conv2dShape& s) {
    CLEAVE_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    CLEAVE_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
    CLEAVE_CUDNN_CHECK(cudnnCreateTensorDescriptor(&bias));
    CLEAVE_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
    CLEAVE_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
    CLEAVE_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, to_int(s.batch),
                                                  to_int(s.in_channels), to_int(s.height), to_int(s.width)));
    CLEAVE_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, to_int(s.batch),
                                                  to_int(s.out_channels), to_int(s.out_height()),
                                                  to_int(s.out_width())));
    CLEAVE_CUDNN_CHECK(
        cudnnSetTensor4dDescriptor(bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, to_int(s.out_channels), 1, 1));
    CLEAVE_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, to_int(s.out_channels),
                                                  to_int(s.in_channels), to_int(s.kernel), to_int(s.kernel)));
    CLEAVE_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, to_int(s.padding), to_int(s.padding), to_int(s.stride),
                                                       to_int(s.stride), 1, 1, CUDNN_CROSS_CORRELATION,
                                                       CUDNN_DATA_FLOAT));
    CLEAVE_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, CUDNN_FMA_MATH));  // no TF32
  }
  ~Descriptors() {
    cudnnDestroyConvolutionDescriptor(conv);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyTensorDescriptor(bias);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyTensorDescriptor(x);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;

  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
};

const char* pass_name(ConvPass pass) {
  switch (pass) {
    case ConvPass::kForward:
      return "conv2d_forward";
    case ConvPass::kBackwardInput:
      return "conv2d_backward_input";
    case ConvPass::kBackwardWeight:
      return "conv2d_backward_weight";
  }
  return "conv2d";
}

// The first of cuDNN's heuristic ranking that succeeds, is deterministic and uses FMA math.
template <typename Perf>
ConvContext::Impl::Choice pick(const Perf* perf, int returned, ConvPass pass, const Conv2dShape& s) {
  for (int i = 0; i < returned; ++i) {
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].determinism == CUDNN_DETERMINISTIC &&
        perf[i].mathType == CUDNN_FMA_MATH) {
      return {static_cast<int>(perf[i].algo), perf[i].memory};
    }
  }
  CLEAVE_THROW("{} on cuda: cuDNN offers no deterministic FMA (non-TF32) algorithm for x [{}, {}, {}, {}], "
               "weight [{}, {}, {}, {}], stride {}, padding {} ({} candidates)",
               pass_name(pass), s.batch, s.in_channels, s.height, s.width, s.out_channels, s.in_channels, s.kernel,
               s.kernel, s.stride, s.padding, returned);
}

ConvContext::Impl::Choice choose(ConvContext::Impl& impl, const Conv2dShape& s, ConvPass pass) {
  const ConvContext::Impl::Key key{static_cast<int>(pass), s.batch, s.in_channels, s.height, s.width,
                                   s.out_channels, s.kernel, s.stride, s.padding};
  if (auto it = impl.choices.find(key); it != impl.choices.end()) return it->second;
  cudnnHandle_t handle = impl.get();
  Descriptors d(s);
  ConvContext::Impl::Choice choice;
  int returned = 0;
  switch (pass) {
    case ConvPass::kForward: {
      std::array<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT> perf{};
      CLEAVE_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle, d.x, d.w, d.conv, d.y, to_int(perf.size()),
                                                                &returned, perf.data()));
      choice = pick(perf.data(), returned, pass, s);
      CLEAVE_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(
          handle, d.x, d.w, d.conv, d.y, static_cast<cudnnConvolutionFwdAlgo_t>(choice.algorithm), &choice.workspace));
      break;
    }
    case ConvPass::kBackwardInput: {
      std::array<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT> perf{};
      CLEAVE_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, d.w, d.y, d.conv, d.x,
                                                                     to_int(perf.size()), &returned, perf.data()));
      choice = pick(perf.data(), returned, pass, s);
      CLEAVE_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(
          handle, d.w, d.y, d.conv, d.x, static_cast<cudnnConvolutionBwdDataAlgo_t>(choice.algorithm),
          &choice.workspace));
      break;
    }
    case ConvPass::kBackwardWeight: {
      std::array<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT> perf{};
      CLEAVE_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, d.x, d.y, d.conv, d.w,
                                                                       to_int(perf.size()), &returned, perf.data()));
      choice = pick(perf.data(), returned, pass, s);
      CLEAVE_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
          handle, d.x, d.y, d.conv, d.w, static_cast<cudnnConvolutionBwdFilterAlgo_t>(choice.algorithm),
          &choice.workspace));
      break;
    }
  }
  impl.choices.emplace(key, choice);
  return choice;
}

ConvContext::Impl::Choice prepare(ConvContext& context, const Conv2dShape& s, ConvPass pass, void* workspace,
                                  std::size_t workspace_bytes, cudaStream_t stream) {
  conv2d_check_shape(s);
  const ConvContext::Impl::Choice choice = choose(context.impl(), s, pass);
  CLEAVE_ASSERT(workspace_bytes >= choice.workspace && (choice.workspace == 0 || workspace != nullptr),
                "cuda {}: workspace of {} bytes, {} needed (conv2d_workspace_size)", pass_name(pass), workspace_bytes,
                choice.workspace);
  CLEAVE_CUDNN_CHECK(cudnnSetStream(context.impl().get(), stream));
  return choice;
}

}  // namespace

void conv2d_check_shape(const Conv2dShape& s) {
  CLEAVE_CHECK(s.batch > 0 && s.in_channels > 0 && s.height > 0 && s.width > 0 && s.out_channels > 0 &&
                   s.kernel > 0 && s.stride > 0 && s.padding >= 0,
               "conv2d: sizes must be positive (batch {}, in_channels {}, {}x{}, out_channels {}, kernel {}, stride "
               "{}, padding {})",
               s.batch, s.in_channels, s.height, s.width, s.out_channels, s.kernel, s.stride, s.padding);
  CLEAVE_CHECK(s.height + 2 * s.padding >= s.kernel && s.width + 2 * s.padding >= s.kernel,
               "conv2d: kernel {} does not fit the {}x{} input with padding {}", s.kernel, s.height, s.width,
               s.padding);
  CLEAVE_CHECK(s.batch * s.in_channels * s.height * s.width < (int64_t{1} << 31) &&
                   s.batch * s.out_channels * s.out_height() * s.out_width() < (int64_t{1} << 31),
               "conv2d on cuda: tensors of 2^31 or more elements are not supported (batch {})", s.batch);
}

std::size_t conv2d_workspace_size(ConvContext& context, const Conv2dShape& shape, ConvPass pass) {
  conv2d_check_shape(shape);
  return choose(context.impl(), shape, pass).workspace;
}

void conv2d_forward(ConvContext& context, const Conv2dShape& shape, const float* x, const float* w, const float* bias,
                    float* y, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  const auto choice = prepare(context, shape, ConvPass::kForward, workspace, workspace_bytes, stream);
  cudnnHandle_t handle = context.impl().get();
  Descriptors d(shape);
  const float one = 1.0f, zero = 0.0f;
  CLEAVE_CUDNN_CHECK(cudnnConvolutionForward(handle, &one, d.x, x, d.w, w, d.conv,
                                             static_cast<cudnnConvolutionFwdAlgo_t>(choice.algorithm), workspace,
                                             workspace_bytes, &zero, d.y, y));
  if (bias != nullptr) CLEAVE_CUDNN_CHECK(cudnnAddTensor(handle, &one, d.bias, bias, &one, d.y, y));
}

void conv2d_backward_input(ConvContext& context, const Conv2dShape& shape, const float* dy, const float* w, float* dx,
                           void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  const auto choice = prepare(context, shape, ConvPass::kBackwardInput, workspace, workspace_bytes, stream);
  Descriptors d(shape);
  const float one = 1.0f, zero = 0.0f;
  CLEAVE_CUDNN_CHECK(cudnnConvolutionBackwardData(context.impl().get(), &one, d.w, w, d.y, dy, d.conv,
                                                  static_cast<cudnnConvolutionBwdDataAlgo_t>(choice.algorithm),
                                                  workspace, workspace_bytes, &zero, d.x, dx));
}

void conv2d_backward_weight(ConvContext& context, const Conv2dShape& shape, const float* x, const float* dy, float* dw,
                            float* dbias, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  const auto choice = prepare(context, shape, ConvPass::kBackwardWeight, workspace, workspace_bytes, stream);
  cudnnHandle_t handle = context.impl().get();
  Descriptors d(shape);
  const float one = 1.0f;
  CLEAVE_CUDNN_CHECK(cudnnConvolutionBackwardFilter(handle, &one, d.x, x, d.y, dy, d.conv,
                                                    static_cast<cudnnConvolutionBwdFilterAlgo_t>(choice.algorithm),
                                                    workspace, workspace_bytes, &one, d.w, dw));
  if (dbias != nullptr) CLEAVE_CUDNN_CHECK(cudnnConvolutionBackwardBias(handle, &one, d.y, dy, &one, d.bias, dbias));
}

}  // namespace cleave::kernels::cuda

// NCCL ops completing on the device (engine/comm/nccl/device_completions.hpp; label gpu; every test skips with the
// reason when no CUDA device is visible). Compiled, not run on a GPU. Run directly (a world of 1 rank, so one GPU
// suffices) and under mpiexec -n 2 where two devices are visible.
//
// The caller's stream is held shut by a gate: a host function enqueued on it that spins until the test opens the
// gate (or a safety deadline passes). An op posted on that stream cannot start before the gate opens, so:
//  - WaitOnAStreamReturnsBeforeTheOpRuns: wait() returns while the gate is still shut (a host wait would sit
//    there until the deadline, and the gate would report it passed), counts no host wait, leaves one op with the
//    watchdog; a copy enqueued on the caller's stream after wait() reads the gathered output, not the poison put
//    there first (all_gather into a separate output differs from its input even on one rank); the watchdog sees
//    the event fire and drops it.
//  - HostCompletionBlocksAndCounts: with NcclOptions::host_completion, wait() returns only after the gate opened
//    (a thread opens it after 200 ms), notes one kCommunication wait and leaves no CUDA error pending (a not-ready
//    event query sets the thread's last error); so does a device op posted with the CPU stream in the default mode.
//  - StepsAfterTheWarmUpMakeNoWorkAndNoEvent: 8 ops in flight make 8 pooled Works and events; three more such
//    steps make none, with right results, on the device path and with host completion.
//  - DISABLED_TimeoutOnTheDeviceIsReported (disabled, as it ends the process by design; run with
//    --gtest_also_run_disabled_tests by ctest gpu_comm_nccl_watchdog and gpu-check.sh stage nccl-watchdog):
//    timeout 1 s, the gate shut for 20 s: wait() returns, the watchdog thread aborts the communicator after
//    ~1 s, and the next call into the communicator reports "comm timeout after" and ends the process with
//    MPI_Abort (exit code 3). The test fails if the process lives.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "engine/comm/nccl/nccl_communicator.hpp"
#include "engine/cuda/caching_allocator.hpp"
#include "kernels/ops/host_waits.hpp"
#include "tests/gpu/comm/gpu_comm_env.hpp"
#include "tests/mpi/mpi_test_env.hpp"

namespace cleave::testing::nccl_completion_test {
namespace {

using Clock = std::chrono::steady_clock;

// Holds a stream shut until open() or the deadline; passed() says the stream went through it.
class StreamGate {
 public:
  explicit StreamGate(double deadline_s) : deadline_(Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                                        std::chrono::duration<double>(deadline_s))) {}
  void shut(cudaStream_t stream) { CLEAVE_CUDA_CHECK(cudaLaunchHostFunc(stream, &StreamGate::hold, this)); }
  void open() { open_ = true; }
  bool passed() const { return passed_; }

 private:
  static void hold(void* self) {
    auto* gate = static_cast<StreamGate*>(self);
    while (!gate->open_ && Clock::now() < gate->deadline_) std::this_thread::sleep_for(std::chrono::microseconds(50));
    gate->passed_ = true;
  }

  Clock::time_point deadline_;
  std::atomic<bool> open_{false};
  std::atomic<bool> passed_{false};
};

class NcclCompletion : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    const std::string why = no_cuda_device(devices, "NCCL completion needs a GPU");
    if (!why.empty()) GTEST_SKIP() << why;
    comm::MpiOptions mpi_options;
    mpi_options.timeout_s = kTestTimeoutS;
    mpi_ = std::make_unique<comm::MpiCommunicator>(MPI_COMM_WORLD, mpi_options, "world");
    if (devices < mpi_->size()) GTEST_SKIP() << mpi_->size() << " ranks but " << devices << " CUDA device(s)";
  }
  void TearDown() override {
    if (user_ != nullptr) cudaStreamSynchronize(user_);
    if (pinned_ != nullptr) cudaFreeHost(pinned_);
    if (user_ != nullptr) cudaStreamDestroy(user_);
    nccl_.reset();
    allocator_.reset();
    mpi_.reset();
  }

  void make(double timeout_s, bool host_completion) {
    comm::NcclOptions options;
    options.timeout_s = timeout_s;
    options.host_completion = host_completion;
    nccl_ = std::make_unique<comm::NcclCommunicator>(*mpi_, options);
    allocator_ = std::make_unique<cuda::CudaCachingAllocator>(nccl_->device());
    CLEAVE_CUDA_CHECK(cudaSetDevice(nccl_->device()));
    CLEAVE_CUDA_CHECK(cudaStreamCreateWithFlags(&user_, cudaStreamNonBlocking));
    nccl_->count_host_waits(&waits_);
  }
  Tensor device(std::int64_t count) {
    return Tensor::empty({count}, DType::kF32, MemoryCategory::kCommunication, *allocator_);
  }
  Stream user_stream() const { return Stream(Device::cuda(nccl_->device()), user_); }
  float value(int rank, std::int64_t i) const { return static_cast<float>(rank * 1000 + i % 997) + 0.25f; }

  // input: this rank's values (uploaded before any gate); output: n blocks, poisoned with NaN bytes.
  void gather_buffers(std::int64_t count, Tensor& input, Tensor& output) {
    input = device(count);
    output = device(count * nccl_->size());
    std::vector<float> mine(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i) mine[static_cast<std::size_t>(i)] = value(nccl_->rank(), i);
    upload(input, mine);
    CLEAVE_CUDA_CHECK(cudaMemset(output.raw_data(), 0xFF, output.nbytes()));
    CLEAVE_CUDA_CHECK(cudaDeviceSynchronize());
  }
  std::int64_t wrong_in_gathered(const float* got, std::int64_t count) const {
    std::int64_t wrong = 0;
    for (int q = 0; q < nccl_->size(); ++q) {
      for (std::int64_t i = 0; i < count; ++i) wrong += got[q * count + i] != value(q, i);
    }
    return wrong;
  }

  std::unique_ptr<comm::MpiCommunicator> mpi_;
  std::unique_ptr<comm::NcclCommunicator> nccl_;
  std::unique_ptr<cuda::CudaCachingAllocator> allocator_;
  cudaStream_t user_ = nullptr;
  float* pinned_ = nullptr;
  ops::HostWaits waits_;
};

TEST_F(NcclCompletion, WaitOnAStreamReturnsBeforeTheOpRuns) {
  make(kTestTimeoutS, false);
  ASSERT_TRUE(nccl_->completes_on_device());
  const std::int64_t count = 100003;
  Tensor input, output;
  gather_buffers(count, input, output);
  CLEAVE_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&pinned_), static_cast<std::size_t>(output.nbytes())));
  StreamGate gate(10.0);
  gate.shut(user_);
  const auto t0 = Clock::now();
  auto work = nccl_->all_gather(input, output, user_stream());
  work->wait();
  const double wait_s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_FALSE(gate.passed()) << "wait() returned only after the caller's stream ran (" << wait_s << " s): it blocked "
                                 "the host";
  EXPECT_TRUE(work->test());  // complete for its caller: the stream is ordered after the op
  EXPECT_EQ(waits_.count(ops::HostWait::kCommunication), 0) << waits_.str();
  EXPECT_EQ(nccl_->outstanding_device_works(), 1u);
  // Stream order: this copy runs after the gather, so it sees the gathered values, not the NaN poison.
  CLEAVE_CUDA_CHECK(cudaMemcpyAsync(pinned_, output.raw_data(), output.nbytes(), cudaMemcpyDeviceToHost, user_));
  work.reset();
  gate.open();
  CLEAVE_CUDA_CHECK(cudaStreamSynchronize(user_));
  EXPECT_EQ(wrong_in_gathered(pinned_, count), 0);
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (nccl_->outstanding_device_works() != 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(nccl_->outstanding_device_works(), 0u) << "the watchdog thread did not see the done event fire";
  // Later ops on the same communicator still work, and a barrier (host tensors: none) goes through.
  auto again = nccl_->all_gather(input, output, user_stream());
  again->wait();
  nccl_->barrier(user_stream())->wait();
  CLEAVE_CUDA_CHECK(cudaMemcpyAsync(pinned_, output.raw_data(), output.nbytes(), cudaMemcpyDeviceToHost, user_));
  CLEAVE_CUDA_CHECK(cudaStreamSynchronize(user_));
  EXPECT_EQ(wrong_in_gathered(pinned_, count), 0);
  EXPECT_EQ(waits_.count(ops::HostWait::kCommunication), 0) << waits_.str();
}

TEST_F(NcclCompletion, HostCompletionBlocksAndCounts) {
  make(kTestTimeoutS, true);
  ASSERT_FALSE(nccl_->completes_on_device());
  const std::int64_t count = 4099;
  Tensor input, output;
  gather_buffers(count, input, output);
  StreamGate gate(10.0);
  gate.shut(user_);
  std::thread opener([&gate] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    gate.open();
  });
  cudaGetLastError();  // the check below is about the waits' polls only
  auto work = nccl_->all_gather(input, output, user_stream());
  work->wait();
  EXPECT_TRUE(gate.passed()) << "host completion returned before the op could run";
  opener.join();
  // The polls saw the done event not ready (the gate was shut): none of those answers may stay behind as the
  // thread's last CUDA error, which the next kernel launch's check would report as its own failure.
  const cudaError_t pending = cudaGetLastError();
  EXPECT_EQ(pending, cudaSuccess) << cudaGetErrorName(pending) << " left pending by NcclWork::test()";
  EXPECT_EQ(waits_.count(ops::HostWait::kCommunication), 1) << waits_.str();
  EXPECT_EQ(nccl_->outstanding_device_works(), 0u);
  std::vector<float> back = download<float>(output);
  EXPECT_EQ(wrong_in_gathered(back.data(), count), 0);

  // The default mode blocks too for a device op posted with the CPU stream (the legacy default stream).
  input = Tensor();  // before the allocator they came from
  output = Tensor();
  nccl_.reset();
  allocator_.reset();
  CLEAVE_CUDA_CHECK(cudaStreamDestroy(user_));
  user_ = nullptr;
  waits_ = ops::HostWaits{};
  make(kTestTimeoutS, false);
  gather_buffers(count, input, output);
  nccl_->all_gather(input, output)->wait();
  EXPECT_EQ(waits_.count(ops::HostWait::kCommunication), 1) << waits_.str();
  back = download<float>(output);
  EXPECT_EQ(wrong_in_gathered(back.data(), count), 0);
}

// Pooled Works and done events (engine/comm/nccl/nccl_work.hpp): a step of 8 all_gathers in flight at once (a ring
// rotation's batch) makes 8 Works and 8 events; three more such steps, each after the watchdog has seen the last
// one's events fire (device completion) or after the host saw them (host completion), make none, and every step's
// results are right (outputs poisoned again before each step, on the caller's stream).
void expect_steady_steps_make_nothing(comm::NcclCommunicator& nccl, const Stream& stream, cudaStream_t user,
                                      const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                                      float* pinned, const std::function<std::int64_t(const float*)>& wrong_in) {
  auto step = [&] {
    std::vector<comm::WorkPtr> works;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      CLEAVE_CUDA_CHECK(cudaMemsetAsync(outputs[i].raw_data(), 0xFF, outputs[i].nbytes(), user));
    }
    for (std::size_t i = 0; i < inputs.size(); ++i) works.push_back(nccl.all_gather(inputs[i], outputs[i], stream));
    for (comm::WorkPtr& w : works) w->wait();
    works.clear();  // back to the pool
    std::int64_t wrong = 0;
    for (const Tensor& out : outputs) {
      CLEAVE_CUDA_CHECK(cudaMemcpyAsync(pinned, out.raw_data(), out.nbytes(), cudaMemcpyDeviceToHost, user));
      CLEAVE_CUDA_CHECK(cudaStreamSynchronize(user));
      wrong += wrong_in(pinned);
    }
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    while (nccl.outstanding_device_works() != 0 && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(nccl.outstanding_device_works(), 0u) << "the watchdog thread did not see the done events fire";
    return wrong;
  };
  EXPECT_EQ(step(), 0) << "the warm-up step";
  const comm::NcclPoolStats warm = nccl.pool_stats();
  EXPECT_EQ(warm.works_made, inputs.size());
  EXPECT_EQ(warm.events_made, inputs.size());
  for (int s = 1; s <= 3; ++s) {
    EXPECT_EQ(step(), 0) << "step " << s;
    EXPECT_EQ(nccl.pool_stats().works_made, warm.works_made) << "step " << s << " made a Work";
    EXPECT_EQ(nccl.pool_stats().events_made, warm.events_made) << "step " << s << " created an event";
  }
}

TEST_F(NcclCompletion, StepsAfterTheWarmUpMakeNoWorkAndNoEvent) {
  for (const bool host_completion : {false, true}) {
    SCOPED_TRACE(host_completion ? "host completion" : "device completion");
    if (user_ != nullptr) {
      CLEAVE_CUDA_CHECK(cudaStreamSynchronize(user_));
      CLEAVE_CUDA_CHECK(cudaStreamDestroy(user_));
      user_ = nullptr;
    }
    make(kTestTimeoutS, host_completion);
    const std::int64_t count = 4099;
    std::vector<Tensor> inputs(8), outputs(8);
    for (std::size_t i = 0; i < inputs.size(); ++i) gather_buffers(count, inputs[i], outputs[i]);
    if (pinned_ == nullptr) {
      CLEAVE_CUDA_CHECK(
          cudaMallocHost(reinterpret_cast<void**>(&pinned_), static_cast<std::size_t>(outputs[0].nbytes())));
    }
    expect_steady_steps_make_nothing(*nccl_, user_stream(), user_, inputs, outputs, pinned_,
                                     [&](const float* got) { return wrong_in_gathered(got, count); });
  }
}

TEST_F(NcclCompletion, DISABLED_TimeoutOnTheDeviceIsReported) {
  make(1.0, false);
  const std::int64_t count = 1021;
  Tensor input, output;
  gather_buffers(count, input, output);
  StreamGate gate(20.0);
  gate.shut(user_);
  auto work = nccl_->all_gather(input, output, user_stream());
  work->wait();
  EXPECT_FALSE(gate.passed());
  std::printf("[ gpu ] wait() returned; the op is held on the device behind the gate, timeout 1 s\n");
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::seconds(3));  // the watchdog thread aborts the communicator meanwhile
  nccl_->barrier(user_stream())->wait();                  // reports the timeout and ends the process
  ADD_FAILURE() << "the process is still alive 3 s after a 1 s timeout and a call into the communicator";
  gate.open();
}

}  // namespace
}  // namespace cleave::testing::nccl_completion_test

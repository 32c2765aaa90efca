// The staged backend's shared pieces (staged_work.hpp): the copy streams, StagedWork's pool, completion and copies
// back, and the host's waits for a stream. Invariants: every wait for the inner op goes through the inner Work, so
// the inner backend's watchdog bounds it; a Work goes back to the pool only complete (or failed, its copies back
// waited for), emptied of buffers, events, inner Work and communicator.
//
// Why copies back run on a private stream: the caller's stream may hold much later work (the rest of a backward
// pass) by the time the inner op completes; a copy queued behind it would delay completion. The private stream
// first waits for the caller's stream as it was at issue (the host waited for it, or an event recorded then).
#include "engine/comm/cuda/staged_work.hpp"

#include "engine/cuda/copy.hpp"
#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/device.hpp"
#include "kernels/ops/host_waits.hpp"

namespace cleave::comm::detail {

StagingResources::StagingResources() = default;

StagingResources::~StagingResources() { works.clear(); }  // idle: they hold no buffer, event or resources

const Stream& StagingResources::copy_stream(int device) {
  auto it = copy_streams.find(device);
  if (it == copy_streams.end()) {
    it = copy_streams.emplace(device, cuda::CudaStream(device, cuda::StreamPriority::kHigh)).first;
  }
  return it->second.stream();
}

StagedOp::StagedOp() {
  keep.reserve(kReserved);
  copy_back.reserve(kReserved);
  host_ops.reserve(kReserved);
}

void StagedOp::clear() noexcept {
  keep.clear();
  copy_back.clear();
  host_ops.clear();
  ready.reset();
}

void note_wait(ops::HostWaits* waits) {
  if (waits != nullptr) waits->note(ops::HostWait::kCommunication);
}

StagedWork::Ptr StagedWork::take(const std::shared_ptr<StagingResources>& resources,
                                 const std::shared_ptr<Communicator>& inner, const char* op, int device,
                                 ops::HostWaits* host_waits) {
  Ptr work(resources->works.take([] { return std::unique_ptr<StagedWork>(new StagedWork()); }).release());
  work->resources_ = resources;
  work->inner_ = inner;
  work->op_ = op;
  work->staged_.device = device;
  work->host_waits_ = host_waits;
  return work;
}

void StagedWork::start(WorkPtr inner_work) {
  CLEAVE_ASSERT(inner_work != nullptr, "{}: the inner communicator returned no Work", op_);
  CLEAVE_ASSERT(done_ && !failed_ && inner_work_ == nullptr, "{}: a staged Work started twice", op_);
  inner_work_ = std::move(inner_work);
  inner_done_ = false;
  done_ = false;
}

StagedWork::~StagedWork() { finish_before_release(); }

void StagedWork::finish_before_release() noexcept {
  if (in_flight()) {
    try {
      complete();
    } catch (const std::exception& e) {
      inner_->abort(fmt::format("{} on comm '{}' (GPU tensors staged through host memory) failed while its Work "
                                "was destroyed: {}",
                                op_, inner_->name(), e.what()));
    }
  }
  // After a failure, a copy back may still be in flight: its pinned buffers must not return to the cache yet.
  // (Its events go back to the pool; the communicator is aborted after a failure.)
  if (failed_ && copied_.has_value()) {
    cudaEventSynchronize(copied_.native());
    cudaGetLastError();
  }
}

void StagedWork::recycle() noexcept {
  finish_before_release();
  inner_work_.reset();
  staged_.clear();
  copied_.reset();
  inner_.reset();
  host_waits_ = nullptr;
  op_ = "";
  inner_done_ = false;
  done_ = true;
  failed_ = false;
  // The resources may go with this last reference, and this Work with their pool: nothing of *this is touched after.
  const std::shared_ptr<StagingResources> resources = std::move(resources_);
  resources->works.give(std::unique_ptr<StagedWork>(this));
}

bool StagedWork::test() {
  if (done_) return true;
  try {
    if (!inner_done_) {
      if (!inner_work_->test()) return false;
      inner_done_ = true;
      start_copy_back();
    }
    if (copied_.has_value()) {
      const cudaError_t status = cuda::query_event(copied_.native());
      if (status == cudaErrorNotReady) return false;
      CLEAVE_CUDA_CHECK(status);
    }
  } catch (...) {
    failed_ = true;
    throw;
  }
  finish();
  return true;
}

void StagedWork::wait() {
  if (done_) return;
  note_wait(host_waits_);
  complete();
}

void StagedWork::complete() {
  try {
    if (!inner_done_) {
      inner_work_->wait();  // the inner backend's watchdog bounds this
      inner_done_ = true;
      start_copy_back();
    }
    if (copied_.has_value()) CLEAVE_CUDA_CHECK(cudaEventSynchronize(copied_.native()));
  } catch (...) {
    failed_ = true;
    throw;
  }
  finish();
}

void StagedWork::start_copy_back() {
  if (staged_.copy_back.empty()) return;
  cuda::DeviceGuard guard(staged_.device);
  const Stream& stream = resources_->copy_stream(staged_.device);
  const cudaStream_t native = cuda::native_stream(stream);
  if (staged_.ready.has_value()) CLEAVE_CUDA_CHECK(cudaStreamWaitEvent(native, staged_.ready.native(), 0));
  for (const auto& [device_output, pinned_result] : staged_.copy_back) {
    cuda::copy_async(device_output, pinned_result, stream);
  }
  copied_ = cuda::PooledEvent(resources_->events.on(staged_.device));
  CLEAVE_CUDA_CHECK(cudaEventRecord(copied_.native(), native));
}

void StagedWork::finish() {
  done_ = true;
  inner_work_.reset();
  staged_.clear();  // the ready event has fired: the copy stream waited for it before the copies, which have finished
  copied_.reset();
}

void record_ready(StagedOp& staged, StagingResources& resources, const Stream& stream) {
  CLEAVE_ASSERT(stream.device() == Device::cuda(staged.device), "a ready event of cuda:{} recorded on a {} stream",
                staged.device, stream.device().str());
  staged.ready = cuda::PooledEvent(resources.events.on(staged.device));
  CLEAVE_CUDA_CHECK(cudaEventRecord(staged.ready.native(), cuda::native_stream(stream)));
}

void host_wait(const Stream& stream, ops::HostWaits* waits) {
  if (stream.device().is_cpu()) return;
  note_wait(waits);
  cuda::DeviceGuard guard(stream.device().index);  // a null native handle names this device's default stream
  cuda::synchronize(stream);
}

Tensor block_of(const Tensor& whole, int index, int blocks, const Shape& shape) {
  const std::int64_t n = whole.numel() / blocks;
  return whole.view(Shape{whole.numel()}).slice(index * n, (index + 1) * n).view(shape);
}

void copy_to_host_and_wait(const Tensor& host, const Tensor& device_input, const Stream& stream,
                           ops::HostWaits* waits) {
  cuda::copy_async(host, device_input, stream);
  note_wait(waits);
  cuda::synchronize(stream);
}

}  // namespace cleave::comm::detail

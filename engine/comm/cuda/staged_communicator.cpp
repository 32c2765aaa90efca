// StagedCommunicator (staged_communicator.hpp).
//
// Why the host blocks at issue instead of starting the inner op later: the inner op must be posted inside the
// call. Posting it from a later test()/wait() would let ranks post collectives in different orders when several
// Works are in flight (each rank tests its Works in its own order), which MPI forbids.
//
// Why copies back run on a private stream: the caller's stream may hold much later work (the rest of a backward
// pass) by the time the inner op completes; a copy queued behind it would delay completion. The private stream
// first waits for the caller's stream as it was at issue (the host waited for it, or an event recorded then).
#include "engine/comm/cuda/staged_communicator.hpp"

#include <cstdlib>
#include <map>
#include <optional>
#include <utility>

#include "engine/cuda/copy.hpp"
#include "engine/cuda/device.hpp"
#include "engine/cuda/stream.hpp"
#include "kernels/ops/host_waits.hpp"

namespace cleave::comm {
namespace detail {

// Shared by a StagedCommunicator, its splits and their Works.
struct StagingResources {
  std::shared_ptr<cuda::PinnedHostAllocator> pinned;  // declared first: outlives the streams' pending copies
  std::map<int, cuda::CudaStream> copy_streams;       // per device, created on first use

  const Stream& copy_stream(int device) {
    auto it = copy_streams.find(device);
    if (it == copy_streams.end()) {
      it = copy_streams.emplace(device, cuda::CudaStream(device, cuda::StreamPriority::kHigh)).first;
    }
    return it->second.stream();
  }
};

namespace {

void note_wait(ops::HostWaits* waits) {
  if (waits != nullptr) waits->note(ops::HostWait::kCommunication);
}

// What one GPU op leaves for its Work: pinned buffers to keep, results to copy back, and the caller's stream
// as it was at issue (when the host did not wait for it).
struct StagedOp {
  int device = 0;
  std::vector<Tensor> keep;                           // pinned inputs (the inner Work keeps them too)
  std::vector<std::pair<Tensor, Tensor>> copy_back;   // (device output, pinned result)
  std::optional<cuda::CudaEvent> ready;
};

class StagedWork final : public Work {
 public:
  StagedWork(std::shared_ptr<StagingResources> resources, std::shared_ptr<Communicator> inner, std::string op,
             StagedOp staged, WorkPtr inner_work, ops::HostWaits* host_waits)
      : resources_(std::move(resources)),
        inner_(std::move(inner)),
        op_(std::move(op)),
        staged_(std::move(staged)),
        inner_work_(std::move(inner_work)),
        host_waits_(host_waits) {
    CLEAVE_ASSERT(inner_work_ != nullptr, "{}: the inner communicator returned no Work", op_);
  }

  // Completes an unfinished op as wait() does, without counting a host wait (the counter may be gone by now).
  ~StagedWork() override {
    if (!done_ && !failed_) {
      try {
        complete();
      } catch (const std::exception& e) {
        inner_->abort(fmt::format("{} on comm '{}' (GPU tensors staged through host memory) failed while its Work "
                                  "was destroyed: {}",
                                  op_, inner_->name(), e.what()));
      }
    }
    // After a failure, a copy back may still be in flight: its pinned buffers must not return to the cache yet.
    if (failed_ && copied_.has_value()) {
      cudaEventSynchronize(copied_->native());
      cudaGetLastError();
    }
  }

  bool test() override {
    if (done_) return true;
    try {
      if (!inner_done_) {
        if (!inner_work_->test()) return false;
        inner_done_ = true;
        start_copy_back();
      }
      if (copied_.has_value() && !copied_->query()) return false;
    } catch (...) {
      failed_ = true;
      throw;
    }
    finish();
    return true;
  }

  // One host wait (kCommunication) per call that finds the op unfinished.
  void wait() override {
    if (done_) return;
    note_wait(host_waits_);
    complete();
  }

 private:
  void complete() {
    try {
      if (!inner_done_) {
        inner_work_->wait();  // the inner backend's watchdog bounds this
        inner_done_ = true;
        start_copy_back();
      }
      if (copied_.has_value()) copied_->synchronize();
    } catch (...) {
      failed_ = true;
      throw;
    }
    finish();
  }

  void start_copy_back() {
    if (staged_.copy_back.empty()) return;
    cuda::DeviceGuard guard(staged_.device);
    const Stream& stream = resources_->copy_stream(staged_.device);
    if (staged_.ready.has_value()) staged_.ready->wait(stream);
    for (const auto& [device_output, pinned_result] : staged_.copy_back) {
      cuda::copy_async(device_output, pinned_result, stream);
    }
    copied_.emplace(staged_.device);
    copied_->record(stream);
  }

  // Releases the pinned buffers to the cache at once, so the next op of the same size reuses them.
  void finish() {
    done_ = true;
    inner_work_.reset();
    staged_.keep.clear();
    staged_.copy_back.clear();
  }

  std::shared_ptr<StagingResources> resources_;  // first: destroyed after every pinned tensor below
  std::shared_ptr<Communicator> inner_;
  std::string op_;
  StagedOp staged_;
  std::optional<cuda::CudaEvent> copied_;  // recorded after the copies back
  WorkPtr inner_work_;
  ops::HostWaits* host_waits_;  // the run's counter, or null
  bool inner_done_ = false;
  bool done_ = false;
  bool failed_ = false;
};

// The host waits for the work queued on `stream` (nothing to wait for on a CPU stream); one host wait noted.
void host_wait(const Stream& stream, ops::HostWaits* waits) {
  if (stream.device().is_cpu()) return;
  note_wait(waits);
  cuda::DeviceGuard guard(stream.device().index);  // a null native handle names this device's default stream
  cuda::synchronize(stream);
}

// Block `index` of `whole` cut into `blocks` equal parts, shaped as `shape` (same storage).
Tensor block_of(const Tensor& whole, int index, int blocks, const Shape& shape) {
  const std::int64_t n = whole.numel() / blocks;
  return whole.view(Shape{whole.numel()}).slice(index * n, (index + 1) * n).view(shape);
}

std::shared_ptr<Communicator> checked_inner(std::unique_ptr<Communicator> inner) {
  CLEAVE_CHECK(inner != nullptr, "StagedCommunicator: the inner communicator is null");
  CLEAVE_CHECK(inner->backend() != "nccl",
               "StagedCommunicator over comm '{}': its backend is nccl, which carries GPU tensors itself; wrap a "
               "communicator that carries CPU tensors (mpi), or use the nccl communicator directly",
               inner->name());
  return std::shared_ptr<Communicator>(std::move(inner));
}

std::shared_ptr<StagingResources> make_resources(std::shared_ptr<cuda::PinnedHostAllocator> pinned) {
  auto resources = std::make_shared<StagingResources>();
  resources->pinned = pinned != nullptr ? std::move(pinned) : std::make_shared<cuda::PinnedHostAllocator>();
  return resources;
}

const char* kind_name(P2PKind kind) { return kind == P2PKind::kSend ? "send to" : "recv from"; }

}  // namespace
}  // namespace detail

using detail::StagedOp;
using detail::StagedWork;

StagedCommunicator::StagedCommunicator(std::unique_ptr<Communicator> inner,
                                       std::shared_ptr<cuda::PinnedHostAllocator> pinned)
    : StagedCommunicator(detail::checked_inner(std::move(inner)), detail::make_resources(std::move(pinned))) {}

StagedCommunicator::StagedCommunicator(std::shared_ptr<Communicator> inner,
                                       std::shared_ptr<detail::StagingResources> resources)
    : inner_(std::move(inner)),
      resources_(std::move(resources)),
      backend_(std::string(inner_->backend()) + "+staging") {}

StagedCommunicator::~StagedCommunicator() = default;

int StagedCommunicator::rank() const { return inner_->rank(); }
int StagedCommunicator::size() const { return inner_->size(); }
std::string_view StagedCommunicator::backend() const { return backend_; }
const std::string& StagedCommunicator::name() const { return inner_->name(); }
const std::vector<int>& StagedCommunicator::world_ranks() const { return inner_->world_ranks(); }
const CommOptions& StagedCommunicator::options() const { return inner_->options(); }
Communicator& StagedCommunicator::inner() const { return *inner_; }
cuda::PinnedHostAllocator& StagedCommunicator::pinned_allocator() const { return *resources_->pinned; }
void StagedCommunicator::count_host_waits(ops::HostWaits* waits) { host_waits_ = waits; }

void StagedCommunicator::abort(const std::string& reason) {
  inner_->abort(reason);
  std::abort();  // not reached: the inner abort ends the job
}

Stream StagedCommunicator::device_stream(Device device, const Stream& stream, std::string_view op) const {
  if (stream.device().is_cpu()) return Stream(device);  // null native handle: the device's legacy default stream
  CLEAVE_CHECK(stream.device() == device,
               "{}: the tensors are on {} but the stream is on {}; pass a stream of the tensors' device (or the CPU "
               "stream, which means that device's default stream)",
               where(op), device.str(), stream.device().str());
  return stream;
}

Tensor StagedCommunicator::pinned_like(const Tensor& t) const {
  return Tensor::empty(t.shape(), t.dtype(), MemoryCategory::kCommunication, *resources_->pinned);
}

std::unique_ptr<Communicator> StagedCommunicator::split_impl(int color, int key, std::string name) {
  // `name` is this communicator's name + "/" + label; the inner split appends the label to the same name.
  const std::string prefix = this->name() + "/";
  CLEAVE_ASSERT(name.starts_with(prefix), "split name '{}' does not extend '{}'", name, prefix);
  std::unique_ptr<Communicator> child = inner_->split(color, key, std::string_view(name).substr(prefix.size()));
  if (child == nullptr) return nullptr;
  return std::unique_ptr<Communicator>(
      new StagedCommunicator(std::shared_ptr<Communicator>(std::move(child)), resources_));
}

WorkPtr StagedCommunicator::all_reduce_impl(const Tensor& tensor, ReduceOp op, const Stream& stream) {
  if (tensor.device().is_cpu()) {
    detail::host_wait(stream, host_waits_);
    return inner_->all_reduce(tensor, op, cpu_stream());
  }
  const Stream copy_in = device_stream(tensor.device(), stream, "all_reduce");
  cuda::DeviceGuard guard(tensor.device().index);
  StagedOp staged;
  staged.device = tensor.device().index;
  Tensor host = pinned_like(tensor);
  cuda::copy_async(host, tensor, copy_in);
  detail::note_wait(host_waits_);
  cuda::synchronize(copy_in);
  staged.copy_back.emplace_back(tensor, host);
  WorkPtr inner_work = inner_->all_reduce(host, op, cpu_stream());
  return std::make_unique<StagedWork>(resources_, inner_, "all_reduce", std::move(staged), std::move(inner_work),
                                      host_waits_);
}

WorkPtr StagedCommunicator::reduce_scatter_impl(const Tensor& input, const Tensor& output, ReduceOp op,
                                                const Stream& stream) {
  // input and output are on one device (checked by Communicator::reduce_scatter).
  if (input.device().is_cpu()) {
    detail::host_wait(stream, host_waits_);
    return inner_->reduce_scatter(input, output, op, cpu_stream());
  }
  const Stream copy_in = device_stream(input.device(), stream, "reduce_scatter");
  cuda::DeviceGuard guard(input.device().index);
  StagedOp staged;
  staged.device = input.device().index;
  Tensor host_in = pinned_like(input);
  // In place stays in place: the host output is the host input's block r, as the device output is.
  Tensor host_out = tensors_overlap(input, output) ? detail::block_of(host_in, rank(), size(), output.shape())
                                                   : pinned_like(output);
  cuda::copy_async(host_in, input, copy_in);
  detail::note_wait(host_waits_);
  cuda::synchronize(copy_in);
  staged.keep.push_back(host_in);
  staged.copy_back.emplace_back(output, host_out);
  WorkPtr inner_work = inner_->reduce_scatter(host_in, host_out, op, cpu_stream());
  return std::make_unique<StagedWork>(resources_, inner_, "reduce_scatter", std::move(staged),
                                      std::move(inner_work), host_waits_);
}

WorkPtr StagedCommunicator::all_gather_impl(const Tensor& input, const Tensor& output, const Stream& stream) {
  if (input.device().is_cpu()) {
    detail::host_wait(stream, host_waits_);
    return inner_->all_gather(input, output, cpu_stream());
  }
  const Stream copy_in = device_stream(input.device(), stream, "all_gather");
  cuda::DeviceGuard guard(input.device().index);
  StagedOp staged;
  staged.device = input.device().index;
  // Gathered in place on the host whatever the device form: the input goes straight into its block r.
  Tensor host_out = pinned_like(output);
  Tensor host_in = detail::block_of(host_out, rank(), size(), input.shape());
  cuda::copy_async(host_in, input, copy_in);
  detail::note_wait(host_waits_);
  cuda::synchronize(copy_in);
  staged.copy_back.emplace_back(output, host_out);
  WorkPtr inner_work = inner_->all_gather(host_in, host_out, cpu_stream());
  return std::make_unique<StagedWork>(resources_, inner_, "all_gather", std::move(staged), std::move(inner_work),
                                      host_waits_);
}

WorkPtr StagedCommunicator::broadcast_impl(const Tensor& tensor, int root, const Stream& stream) {
  if (tensor.device().is_cpu()) {
    detail::host_wait(stream, host_waits_);
    return inner_->broadcast(tensor, root, cpu_stream());
  }
  const Stream order = device_stream(tensor.device(), stream, "broadcast");
  cuda::DeviceGuard guard(tensor.device().index);
  StagedOp staged;
  staged.device = tensor.device().index;
  Tensor host = pinned_like(tensor);
  if (rank() == root) {
    cuda::copy_async(host, tensor, order);
    detail::note_wait(host_waits_);
    cuda::synchronize(order);
    staged.keep.push_back(host);
  } else {
    // Output only: no need to block the host; the copy back waits for the stream as it is now.
    staged.ready.emplace(staged.device);
    staged.ready->record(order);
    staged.copy_back.emplace_back(tensor, host);
  }
  WorkPtr inner_work = inner_->broadcast(host, root, cpu_stream());
  return std::make_unique<StagedWork>(resources_, inner_, "broadcast", std::move(staged), std::move(inner_work),
                                      host_waits_);
}

WorkPtr StagedCommunicator::barrier_impl(const Stream& stream) {
  detail::host_wait(stream, host_waits_);
  return inner_->barrier(cpu_stream());
}

WorkPtr StagedCommunicator::batch_p2p_impl(std::vector<P2POp> ops, const Stream& stream) {
  // ops: receives first, no empty tensors, peers and tags checked (Communicator::batch_p2p).
  const P2POp* first_cuda = nullptr;
  bool device_sends = false;
  bool cpu_tensors = false;
  for (const P2POp& op : ops) {
    const Device device = op.tensor.device();
    if (device.is_cpu()) {
      cpu_tensors = true;
      continue;
    }
    if (first_cuda == nullptr) first_cuda = &op;
    CLEAVE_CHECK(device == first_cuda->tensor.device(),
                 "{}: the {} peer {} (tag {}) is on {} but the {} peer {} (tag {}) is on {}; one batch carries "
                 "tensors of one CUDA device (CPU tensors may be mixed in)",
                 where("batch_p2p"), detail::kind_name(op.kind), op.peer, op.tag, device.str(),
                 detail::kind_name(first_cuda->kind), first_cuda->peer, first_cuda->tag,
                 first_cuda->tensor.device().str());
    device_sends = device_sends || op.kind == P2PKind::kSend;
  }
  if (first_cuda == nullptr) {
    detail::host_wait(stream, host_waits_);
    return inner_->batch_p2p(std::move(ops), cpu_stream());
  }
  const Device device = first_cuda->tensor.device();
  const Stream order = device_stream(device, stream, "batch_p2p");
  cuda::DeviceGuard guard(device.index);
  StagedOp staged;
  staged.device = device.index;
  std::vector<P2POp> host_ops;
  host_ops.reserve(ops.size());
  for (P2POp& op : ops) {
    if (op.tensor.device().is_cpu()) {
      host_ops.push_back(std::move(op));
      continue;
    }
    Tensor host = pinned_like(op.tensor);
    if (op.kind == P2PKind::kSend) {
      cuda::copy_async(host, op.tensor, order);
      staged.keep.push_back(host);
    } else {
      staged.copy_back.emplace_back(op.tensor, host);
    }
    host_ops.push_back(P2POp{op.kind, host, op.peer, op.tag});
  }
  // The host reads device sends and, with a CUDA stream, CPU tensors that stream may still produce: wait for
  // it. A batch of device receives only (receives posted ahead) does not block; its copies back wait instead.
  if (device_sends || (cpu_tensors && stream.device().is_cuda())) {
    detail::note_wait(host_waits_);
    cuda::synchronize(order);
  } else {
    staged.ready.emplace(staged.device);
    staged.ready->record(order);
  }
  WorkPtr inner_work = inner_->batch_p2p(std::move(host_ops), cpu_stream());
  return std::make_unique<StagedWork>(resources_, inner_, "batch_p2p", std::move(staged), std::move(inner_work),
                                      host_waits_);
}

}  // namespace cleave::comm

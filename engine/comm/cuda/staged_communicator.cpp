// StagedCommunicator (staged_communicator.hpp): construction, accessors, split, barrier and batched point-to-point;
// the collectives are in staged_collectives.cpp, and what both share (the resources, StagedWork) in staged_work.hpp.
// Invariant: every op reaches the inner communicator inside the call, in issue order (the host blocks at issue
// instead of starting the inner op later: staged_collectives.cpp says why).
#include "engine/comm/cuda/staged_communicator.hpp"

#include <cstdlib>
#include <utility>

#include "engine/comm/cuda/staged_work.hpp"
#include "engine/cuda/copy.hpp"
#include "engine/cuda/device.hpp"

namespace cleave::comm {
namespace detail {
namespace {

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
std::size_t StagedCommunicator::events_made() const { return resources_->events.made(); }
std::size_t StagedCommunicator::works_made() const { return resources_->works.made(); }

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

detail::StagedWork::Ptr StagedCommunicator::take_work(const char* op, Device device) const {
  return StagedWork::take(resources_, inner_, op, device.index, host_waits_);
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

WorkPtr StagedCommunicator::barrier_impl(const Stream& stream) {
  detail::host_wait(stream, host_waits_);
  return inner_->barrier(cpu_stream());
}

WorkPtr StagedCommunicator::batch_p2p_impl(std::span<const P2POp> ops, const Stream& stream) {
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
    return inner_->batch_p2p(ops, cpu_stream());
  }
  const Device device = first_cuda->tensor.device();
  const Stream order = device_stream(device, stream, "batch_p2p");
  cuda::DeviceGuard guard(device.index);
  StagedWork::Ptr work = take_work("batch_p2p", device);
  StagedOp& staged = work->staged();
  std::vector<P2POp>& host_ops = staged.host_ops;  // the Work's: within its capacity once warm
  for (const P2POp& op : ops) {
    if (op.tensor.device().is_cpu()) {
      host_ops.push_back(op);
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
    detail::record_ready(staged, *resources_, order);
  }
  work->start(inner_->batch_p2p(host_ops, cpu_stream()));
  return work;
}

}  // namespace cleave::comm

// Scratch memory a CPU kernel call borrows: one shared block (a table every thread reads, per-row partial results)
// and one f32 block per OpenMP thread (a widened row, a cache-sized chunk). Grown to the largest call seen and
// kept, so the memory belongs to whoever owns the KernelScratch: a run's is in the CPU backend's resources
// (kernels/ops/cpu/cpu_resources.hpp); a kernel given none makes one for the call (ScratchFor). Nothing here is
// process state: no static, no thread_local.
//
// Invariants:
//  - one call at a time: a Lease holds the scratch until the call returns; a second lease while one is live is a
//    bug (asserted). Runs never share a KernelScratch, and a run's ops never overlap (pipeline/overlap_pair.hpp);
//    a call made inside an active parallel region takes a scratch of its own (ScratchFor).
//  - each thread of the team a call starts gets its own block (thread_block(), by omp_get_thread_num()), 64-byte
//    aligned and padded, so no two threads share a cache line;
//  - grows only when a call needs more than every call before it (growths()), so once a run has seen its shapes
//    (its first step) no call allocates; leases() counts the calls served (tests: a steady-state step leases
//    and does not grow);
//  - contents are never read before the call writes them, so results never depend on the scratch or its owner.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace cleave::kernels::cpu {

class KernelScratch {
 public:
  // One call's view: `shared_bytes` at shared(), `thread_floats` f32 for each thread at thread_block().
  class Lease {
   public:
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease();
    std::byte* shared() const { return shared_; }
    // The calling thread's block: thread t of the team the call started, or block 0 on a thread outside any
    // team of the call's (a serial loop, whose single thread may carry an outer team's number).
    float* thread_block() const;

   private:
    friend class KernelScratch;
    Lease(KernelScratch& owner, std::byte* shared, float* blocks, std::size_t stride, int slots)
        : owner_(owner), shared_(shared), blocks_(blocks), stride_(stride), slots_(slots) {}
    KernelScratch& owner_;
    std::byte* shared_;
    float* blocks_;
    std::size_t stride_;  // floats between two threads' blocks (a multiple of 16: 64 bytes)
    int slots_;           // blocks: omp_get_max_threads() when leased
  };

  KernelScratch() = default;
  KernelScratch(const KernelScratch&) = delete;
  KernelScratch& operator=(const KernelScratch&) = delete;

  // Room for one call, made outside its parallel region: grows the memory when this call needs more than any
  // before it (the old contents are dropped).
  Lease lease(std::size_t shared_bytes, std::size_t thread_floats);

  std::size_t growths() const { return growths_; }  // system allocations made
  std::size_t leases() const { return leases_; }    // calls served
  std::size_t bytes() const { return bytes_; }      // held now

 private:
  struct Free {
    void operator()(std::byte* p) const;
  };
  std::unique_ptr<std::byte[], Free> data_;
  std::size_t bytes_ = 0;
  std::size_t growths_ = 0;
  std::size_t leases_ = 0;
  std::atomic<bool> leased_{false};
};

// The scratch one kernel call uses: `given` (the run's), or one of its own, made for the call and freed when it
// returns, when none is given (tests, tools) or the call runs inside an active parallel region (where the team's
// other threads may be using `given`). Costs nothing until leased.
class ScratchFor {
 public:
  explicit ScratchFor(KernelScratch* given);
  KernelScratch& get() { return *use_; }

 private:
  KernelScratch own_;
  KernelScratch* use_;
};

}  // namespace cleave::kernels::cpu

// The state oneDNN's GEMM kernels (gemm_onednn.cpp) run with: matmul primitives cached by problem (sizes,
// strides, transposes, alpha, beta, dtypes, bias), each with the memory objects its calls rebind (bindings), and the
// slots the calls run in (a oneDNN stream and a scratchpad each). One per run, owned by the CPU backend's resources
// (kernels/ops/cpu/cpu_resources.hpp) and handed to gemm.hpp's functions in GemmLibrary: nothing of it is process
// state, so two runs in one process never share or race on it.
//
// Invariants: a primitive is made once per distinct problem and never erased. The bound: one per distinct exact
// problem (a run's layer shapes and their slices: a few dozen) plus one per distinct varying problem, whose key
// leaves out m and k (GemmShape::kVarying, gemm_backend.hpp: a grouped GEMM's groups, one per expert projection and
// pass), so the count never depends on how many rows routing sends to an expert (issue 33: the example moe made
// 1,586 primitives in 30 steps when each row count had its own; primitives() lets tests check the bound);
// a slot and a primitive's bindings serve one call at a time (two slices of one GEMM run the same primitive at once,
// each with its own); a team's first call makes one slot per thread of the team, a primitive's first call one
// bindings per thread, and every scratchpad is sized to the largest of any primitive made so far, so how many there
// are and their sizes follow from the calls made, never from their timing, and once a run has seen its shapes (its
// first step) an exact GEMM allocates nothing of ours (tests/e2e/steady_state_heap_test.cpp; what oneDNN's execute
// allocates inside itself is its own). A kVarying call remakes the memory objects whose sizes changed since its
// bindings' last call (oneDNN 2.x cannot change a memory object's descriptor): nothing of ours allocates then (the
// descriptors are built in place and the objects held by their C handles), but oneDNN's dnnl_memory_create does
// (two posix_memalign per object, its own). Thread-safe: the cache, the free
// slots and bindings are guarded by a mutex; oneDNN primitives may run concurrently. In a build without oneDNN it is
// empty (its kernels throw "not built").
#pragma once

#include <cstddef>
#include <memory>

namespace cleave::kernels::cpu {

class OneDnnMatmuls {
 public:
  OneDnnMatmuls();
  ~OneDnnMatmuls();
  OneDnnMatmuls(const OneDnnMatmuls&) = delete;
  OneDnnMatmuls& operator=(const OneDnnMatmuls&) = delete;

  // How many primitives are cached, how many scratchpads (slots) exist and the bytes each holds (tests: a steady
  // state grows none of them).
  std::size_t primitives() const;
  std::size_t scratchpads() const;
  std::size_t scratchpad_bytes() const;
  // How many oneDNN memory objects its calls have made so far (tests: an exact GEMM's steady state makes none, a
  // grouped GEMM's group at most two when its row count changed: each costs oneDNN's dnnl_memory_create).
  std::size_t memory_objects() const;

  struct State;  // gemm_onednn.cpp
  State& state() { return *state_; }

 private:
  std::unique_ptr<State> state_;
};

}  // namespace cleave::kernels::cpu

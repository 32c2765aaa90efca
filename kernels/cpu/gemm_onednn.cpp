// oneDNN's matmul as single-threaded GEMM kernels (gemm_kernels.hpp): f32 operands, and bf16 operands with f32
// accumulation (oneDNN's brgemm kernels use avx512_bf16 / AMX instructions where its ISA detection finds them).
//
// Single thread: oneDNN (built on OpenMP) sizes a primitive's work split from omp_get_max_threads() when the
// primitive is created, and may split k over threads (then the bits depend on the thread count). Every call here
// creates and runs its primitive with the calling task's OpenMP thread count set to 1 (inside a one-thread
// region when called outside any), so a primitive is always the single-thread one and gemm.cpp's slicing
// decides the threading, for every library alike.
//
// Primitives are cached by problem (sizes, strides, transposes, alpha, beta, dtypes) in the run's OneDnnMatmuls
// (onednn_matmuls.hpp), which the caller passes: creating one costs tens of microseconds, as much as a small GEMM.
// So are the objects a call needs around it (the steady-state rule: no allocation per call): each primitive keeps
// memory objects whose data handles a call rebinds, each slot a stream and a scratchpad, and the primitive runs
// through oneDNN's C dnnl_primitive_execute on a fixed argument array.
// A GemmShape::kVarying problem (a grouped GEMM's group) leaves m and k out of its key: its primitive takes them at
// run time (DNNL_RUNTIME_DIM_VAL), so one primitive serves every row count routing produces. oneDNN 2.6 runs such
// a primitive on its gemm:jit kernels rather than brgemm (measured per call on the MoE expert shapes, 2-vCPU Zen 4:
// bf16 1.01-1.06x brgemm's time, f32 0.98-1.01x; an exact primitive costs ~160 us to make, more than such a GEMM),
// and its bits may
// differ from the exact primitive's: a kVarying GEMM's bits are a function of its shape, as every GEMM's are.
// Nothing here is process state.
#include "cleave/config.hpp"
#include "engine/core/error.hpp"
#include "kernels/cpu/gemm_backend.hpp"
#include "kernels/cpu/gemm_kernels.hpp"
#include "kernels/cpu/onednn_matmuls.hpp"

#if CLEAVE_WITH_ONEDNN
#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <vector>
#endif

namespace cleave::kernels::cpu {

#if CLEAVE_WITH_ONEDNN
namespace {

using dt = dnnl::memory::data_type;

struct ProblemKey {
  bool trans_a, trans_b;
  std::int64_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  dt in, out;
  bool bias = false;  // an f32 bias of n elements added in the kernel's epilogue (alpha 1, beta 0)
  GemmShape shape = GemmShape::kExact;  // kVarying: m and k are given at run time (they are 0 in the cache's key)
  auto tie() const { return std::tie(trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta, in, out, bias, shape); }
  bool operator<(const ProblemKey& o) const { return tie() < o.tie(); }
};

// A cached primitive's memory objects, for one call at a time: a call rebinds their data handles
// (set_data_handle) and makes none. A kVarying primitive's A, B and C descriptors carry the call's m and k, so its
// bindings remake the objects whose sizes changed since their last call (oneDNN 2.x has no call that changes a
// memory object's descriptor): a grouped GEMM's group allocates when its row count differs from the last one seen.
struct Bindings {
  dnnl::memory a, b, c, bias, scratchpad;
  std::int64_t m = -1, k = -1;  // the sizes a, b and c were made for (kVarying; the key's own when kExact)
};

struct Matmul {
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, c, bias, scratchpad;
  std::vector<std::unique_ptr<Bindings>> free_bindings;  // those no call is using (under State::mutex)
  std::size_t bindings = 0;                              // made so far (free or in use)
};

using dims = dnnl::memory::dims;

// Row-major storage; a transposed operand is the same memory read with swapped strides. m and k may be
// DNNL_RUNTIME_DIM_VAL (a primitive's descriptors) or the call's sizes (its memory objects).
dnnl::memory::desc a_desc(const ProblemKey& p, std::int64_t m, std::int64_t k) {
  return dnnl::memory::desc(dims{m, k}, p.in, p.trans_a ? dims{1, p.lda} : dims{p.lda, 1});
}
dnnl::memory::desc b_desc(const ProblemKey& p, std::int64_t k) {
  return dnnl::memory::desc(dims{k, p.n}, p.in, p.trans_b ? dims{1, p.ldb} : dims{p.ldb, 1});
}
dnnl::memory::desc c_desc(const ProblemKey& p, std::int64_t m) {
  return dnnl::memory::desc(dims{m, p.n}, p.out, dims{p.ldc, 1});
}

Matmul make_matmul(const dnnl::engine& engine, const ProblemKey& p) {
  const bool varying = p.shape == GemmShape::kVarying;
  const std::int64_t m = varying ? DNNL_RUNTIME_DIM_VAL : p.m, k = varying ? DNNL_RUNTIME_DIM_VAL : p.k;
  const dnnl::memory::desc a = a_desc(p, m, k), b = b_desc(p, k), c = c_desc(p, m);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // each call brings its own (see run_matmul)
  if (p.alpha != 1.0f) attr.set_output_scales(0, {p.alpha});
  if (p.beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(p.beta);
    attr.set_post_ops(ops);
  }
  if (p.bias) {
    // oneDNN adds the bias to the f32 accumulator in the kernel's epilogue, before C is converted to its dtype:
    // C = round(A B + bias) in one pass, the same arithmetic as the product in f32 followed by a bias pass.
    const dnnl::memory::desc bias(dims{1, p.n}, dt::f32, dims{p.n, 1});
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, bias, c), attr, engine);
    return {dnnl::matmul(pd), a, b, c, bias, pd.scratchpad_desc(), {}, 0};
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine);
  return {dnnl::matmul(pd), a, b, c, {}, pd.scratchpad_desc(), {}, 0};
}

// What a call holds alone besides its bindings: the stream it executes on (a oneDNN stream serves one thread at a
// time) and its scratchpad.
struct Slot {
  Slot(const dnnl::engine& engine, std::size_t bytes) : stream(engine), scratchpad(bytes) {}
  dnnl::stream stream;
  std::vector<std::byte> scratchpad;
};
using SlotPtr = std::unique_ptr<Slot>;

// Bindings of a kExact primitive, made once with the key's sizes; a kVarying one's A, B and C are made at its
// first call.
std::unique_ptr<Bindings> make_bindings(const dnnl::engine& engine, const ProblemKey& key, const Matmul& mm) {
  auto out = std::make_unique<Bindings>();
  if (key.shape != GemmShape::kVarying) {
    out->a = dnnl::memory(mm.a, engine, nullptr);
    out->b = dnnl::memory(mm.b, engine, nullptr);
    out->c = dnnl::memory(mm.c, engine, nullptr);
    out->m = key.m;
    out->k = key.k;
  }
  if (key.bias) out->bias = dnnl::memory(mm.bias, engine, nullptr);
  out->scratchpad = dnnl::memory(mm.scratchpad, engine, nullptr);
  return out;
}

}  // namespace

// The run's primitives, their bindings and the calls' slots (onednn_matmuls.hpp).
struct OneDnnMatmuls::State {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  mutable std::mutex mutex;            // guards the members below and every Matmul's free_bindings
  std::map<ProblemKey, Matmul> cache;  // std::map nodes never move; entries are never erased
  std::vector<SlotPtr> free_slots;     // those no call is using
  std::size_t slots = 0;               // made so far (free or in use)
  std::size_t scratchpad_bytes = 0;    // the largest scratchpad of any cached primitive

  // One call's share: the problem's primitive (made on first use), bindings of it and a slot (stream and a
  // scratchpad of scratchpad_bytes), for this call alone. `team`: the calling OpenMP team's size, the most calls that
  // can run at once. How many slots and bindings exist and how large depends only on the sequence of calls, never on
  // their timing: a team's first call makes one slot per thread, a primitive's first call one bindings per thread,
  // and a new largest primitive grows every free scratchpad at once (those in use on their release). So a run's
  // first step makes them all and a steady state makes nothing.
  struct Lease {
    Matmul* matmul = nullptr;
    std::unique_ptr<Bindings> bindings;
    SlotPtr slot;
  };
  void acquire(const ProblemKey& key, int team, Lease& lease) {
    std::lock_guard lock(mutex);
    auto it = cache.find(key);
    if (it == cache.end()) {
      it = cache.emplace(key, make_matmul(engine, key)).first;
      if (it->second.scratchpad.get_size() > scratchpad_bytes) {
        scratchpad_bytes = it->second.scratchpad.get_size();
        for (SlotPtr& free : free_slots) free->scratchpad.resize(scratchpad_bytes);
      }
    }
    Matmul& mm = it->second;
    for (; slots < static_cast<std::size_t>(team); ++slots) {
      free_slots.push_back(std::make_unique<Slot>(engine, scratchpad_bytes));
    }
    if (free_slots.empty()) {  // more calls at once than the team's threads: not a pattern gemm.cpp makes
      free_slots.push_back(std::make_unique<Slot>(engine, scratchpad_bytes));
      ++slots;
    }
    for (; mm.bindings < static_cast<std::size_t>(team); ++mm.bindings) {
      mm.free_bindings.push_back(make_bindings(engine, key, mm));
    }
    if (mm.free_bindings.empty()) {
      mm.free_bindings.push_back(make_bindings(engine, key, mm));
      ++mm.bindings;
    }
    lease.matmul = &mm;
    lease.slot = std::move(free_slots.back());
    free_slots.pop_back();
    lease.bindings = std::move(mm.free_bindings.back());
    mm.free_bindings.pop_back();
    if (lease.slot->scratchpad.size() < scratchpad_bytes) lease.slot->scratchpad.resize(scratchpad_bytes);
  }
  void release(Lease& lease) {
    std::lock_guard lock(mutex);
    if (lease.bindings) lease.matmul->free_bindings.push_back(std::move(lease.bindings));
    if (lease.slot) {
      // a larger primitive came meanwhile
      if (lease.slot->scratchpad.size() < scratchpad_bytes) lease.slot->scratchpad.resize(scratchpad_bytes);
      free_slots.push_back(std::move(lease.slot));
    }
  }
};

OneDnnMatmuls::OneDnnMatmuls() : state_(std::make_unique<State>()) {}
OneDnnMatmuls::~OneDnnMatmuls() = default;

std::size_t OneDnnMatmuls::primitives() const {
  std::lock_guard lock(state_->mutex);
  return state_->cache.size();
}
std::size_t OneDnnMatmuls::scratchpads() const {
  std::lock_guard lock(state_->mutex);
  return state_->slots;
}
std::size_t OneDnnMatmuls::scratchpad_bytes() const {
  std::lock_guard lock(state_->mutex);
  return state_->scratchpad_bytes;
}

namespace {

// The call's share goes back to the free lists however the call ends.
class CallLease {
 public:
  explicit CallLease(OneDnnMatmuls::State& state) : state_(state) {}
  ~CallLease() {
    if (lease_.matmul != nullptr) state_.release(lease_);
  }
  CallLease(const CallLease&) = delete;
  CallLease& operator=(const CallLease&) = delete;
  OneDnnMatmuls::State::Lease& get() { return lease_; }

 private:
  OneDnnMatmuls::State& state_;
  OneDnnMatmuls::State::Lease lease_;
};

// A kVarying call's memory objects for its m and k (remade only where they changed since the bindings' last call).
void bind_sizes(const dnnl::engine& engine, const ProblemKey& key, std::int64_t m, std::int64_t k, Bindings& bind) {
  if (bind.m == m && bind.k == k) return;
  bind.a = dnnl::memory(a_desc(key, m, k), engine, nullptr);
  if (bind.k != k) bind.b = dnnl::memory(b_desc(key, k), engine, nullptr);
  if (bind.m != m) bind.c = dnnl::memory(c_desc(key, m), engine, nullptr);
  bind.m = m;
  bind.k = k;
}

// `key` is the cache's key (m and k 0 when kVarying); `m` and `k` the call's sizes. Nothing here allocates once
// the primitive, its bindings and the slots exist (kVarying: once its bindings have seen the call's m and k): the
// memory objects are rebound to the call's pointers and the primitive runs through oneDNN's C interface on a fixed
// argument array (the C++ execute() builds a std::vector of them per call).
void run_matmul(OneDnnMatmuls::State& state, const ProblemKey& key, int team, std::int64_t m, std::int64_t k,
                const void* a, const void* b, void* c, const float* bias) {
  // Each call has its own bindings and slot: two slices of one GEMM run the same primitive at once.
  CallLease call(state);
  OneDnnMatmuls::State::Lease& lease = call.get();
  state.acquire(key, team, lease);
  Bindings& bind = *lease.bindings;
  if (key.shape == GemmShape::kVarying) bind_sizes(state.engine, key, m, k, bind);
  bind.a.set_data_handle(const_cast<void*>(a));
  bind.b.set_data_handle(const_cast<void*>(b));
  bind.c.set_data_handle(c);
  bind.scratchpad.set_data_handle(lease.slot->scratchpad.data());
  dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, bind.a.get()},
                             {DNNL_ARG_WEIGHTS, bind.b.get()},
                             {DNNL_ARG_DST, bind.c.get()},
                             {DNNL_ARG_SCRATCHPAD, bind.scratchpad.get()},
                             {DNNL_ARG_BIAS, nullptr}};
  int nargs = 4;
  if (key.bias) {
    bind.bias.set_data_handle(const_cast<float*>(bias));
    args[nargs++].memory = bind.bias.get();
  }
  dnnl::stream& stream = lease.slot->stream;
  dnnl::error::wrap_c_api(dnnl_primitive_execute(lease.matmul->primitive.get(), stream.get(), nargs, args),
                          "could not execute a primitive");
  stream.wait();
}

// Runs the matmul as the single-thread primitive (see the file comment). `problem` holds the call's sizes.
void run_single_threaded(OneDnnMatmuls& matmuls, const ProblemKey& problem, const void* a, const void* b, void* c,
                         const float* bias = nullptr) {
  OneDnnMatmuls::State& state = matmuls.state();
  ProblemKey key = problem;
  if (key.shape == GemmShape::kVarying) key.m = key.k = 0;  // one primitive for every m and k
  const ProblemKey& p = problem;
  try {
    if (omp_in_parallel()) {
      const int team = omp_get_num_threads();  // the slices that may run at once, each with its scratchpad
      omp_set_num_threads(1);                  // this task's setting only; ends with the enclosing region
      run_matmul(state, key, team, p.m, p.k, a, b, c, bias);
      return;
    }
    std::exception_ptr failure;
#pragma omp parallel num_threads(1)
    {
      omp_set_num_threads(1);
      try {
        run_matmul(state, key, /*team=*/1, p.m, p.k, a, b, c, bias);
      } catch (...) {
        failure = std::current_exception();
      }
    }
    if (failure) std::rethrow_exception(failure);
  } catch (const dnnl::error& e) {
    CLEAVE_THROW("gemm: oneDNN matmul failed for {}x{}x{} (trans_a {}, trans_b {}, lda {}, ldb {}, ldc {}, {} shape): "
                 "{}",
                 p.m, p.n, p.k, p.trans_a, p.trans_b, p.lda, p.ldb, p.ldc,
                 p.shape == GemmShape::kVarying ? "varying" : "exact", e.what());
  }
}

const char* isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    default: return "other";
  }
}

}  // namespace

bool onednn_bf16_instructions() {
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  return isa == dnnl_cpu_isa_avx512_core_bf16 || isa == dnnl_cpu_isa_avx512_core_amx;
}

bool onednn_bf16_supported() {
  const auto isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
  const auto avx512_core = static_cast<unsigned>(dnnl_cpu_isa_avx512_core);  // the ISA values are bit sets
  return (isa & avx512_core) == avx512_core;
}

std::string onednn_description() {
  const dnnl_version_t* v = dnnl_version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
         " (isa " + isa_name(dnnl_get_effective_cpu_isa()) + ")";
}

namespace gemm_detail {

void sgemm_onednn(OneDnnMatmuls& matmuls, GemmShape shape, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
                  std::int64_t k, float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                  float beta, float* c, std::int64_t ldc) {
  run_single_threaded(matmuls, {trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta, dt::f32, dt::f32, false, shape},
                      a, b, c);
}

void bf16gemm_onednn_f32(OneDnnMatmuls& matmuls, GemmShape shape, bool trans_a, bool trans_b, std::int64_t m,
                         std::int64_t n, std::int64_t k, float alpha, const std::uint16_t* a, std::int64_t lda,
                         const std::uint16_t* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  run_single_threaded(matmuls, {trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta, dt::bf16, dt::f32, false, shape},
                      a, b, c);
}

void bf16gemm_onednn_bf16(OneDnnMatmuls& matmuls, GemmShape shape, bool trans_a, bool trans_b, std::int64_t m,
                          std::int64_t n, std::int64_t k, float alpha, const std::uint16_t* a, std::int64_t lda,
                          const std::uint16_t* b, std::int64_t ldb, float beta, std::uint16_t* c, std::int64_t ldc) {
  run_single_threaded(matmuls,
                      {trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta, dt::bf16, dt::bf16, false, shape}, a, b,
                      c);
}

void bf16gemm_onednn_f32_bias(OneDnnMatmuls& matmuls, GemmShape shape, bool trans_a, bool trans_b, std::int64_t m,
                              std::int64_t n, std::int64_t k, const std::uint16_t* a, std::int64_t lda,
                              const std::uint16_t* b, std::int64_t ldb, const float* bias, float* c, std::int64_t ldc) {
  ProblemKey key{trans_a, trans_b, m, n, k, lda, ldb, ldc, 1.0f, 0.0f, dt::bf16, dt::f32};
  key.bias = true;
  key.shape = shape;
  run_single_threaded(matmuls, key, a, b, c, bias);
}

void bf16gemm_onednn_bf16_bias(OneDnnMatmuls& matmuls, GemmShape shape, bool trans_a, bool trans_b, std::int64_t m,
                               std::int64_t n, std::int64_t k, const std::uint16_t* a, std::int64_t lda,
                               const std::uint16_t* b, std::int64_t ldb, const float* bias, std::uint16_t* c,
                               std::int64_t ldc) {
  ProblemKey key{trans_a, trans_b, m, n, k, lda, ldb, ldc, 1.0f, 0.0f, dt::bf16, dt::bf16};
  key.bias = true;
  key.shape = shape;
  run_single_threaded(matmuls, key, a, b, c, bias);
}

}  // namespace gemm_detail

#else  // !CLEAVE_WITH_ONEDNN

struct OneDnnMatmuls::State {};

OneDnnMatmuls::OneDnnMatmuls() : state_(std::make_unique<State>()) {}
OneDnnMatmuls::~OneDnnMatmuls() = default;
std::size_t OneDnnMatmuls::primitives() const { return 0; }
std::size_t OneDnnMatmuls::scratchpads() const { return 0; }
std::size_t OneDnnMatmuls::scratchpad_bytes() const { return 0; }

bool onednn_bf16_instructions() { return false; }
bool onednn_bf16_supported() { return false; }
std::string onednn_description() { return "not built"; }

namespace gemm_detail {
namespace {
[[noreturn]] void not_built() {
  CLEAVE_THROW("gemm: the onednn library is not built into this cleave (CMake found no oneDNN; apt package "
               "libdnnl-dev, scripts/install-deps.sh)");
}
}  // namespace

void sgemm_onednn(OneDnnMatmuls&, GemmShape, bool, bool, std::int64_t, std::int64_t, std::int64_t, float, const float*,
                  std::int64_t, const float*, std::int64_t, float, float*, std::int64_t) {
  not_built();
}
void bf16gemm_onednn_f32(OneDnnMatmuls&, GemmShape, bool, bool, std::int64_t, std::int64_t, std::int64_t, float,
                         const std::uint16_t*, std::int64_t, const std::uint16_t*, std::int64_t, float, float*,
                         std::int64_t) {
  not_built();
}
void bf16gemm_onednn_bf16(OneDnnMatmuls&, GemmShape, bool, bool, std::int64_t, std::int64_t, std::int64_t, float,
                          const std::uint16_t*, std::int64_t, const std::uint16_t*, std::int64_t, float,
                          std::uint16_t*, std::int64_t) {
  not_built();
}
void bf16gemm_onednn_f32_bias(OneDnnMatmuls&, GemmShape, bool, bool, std::int64_t, std::int64_t, std::int64_t,
                              const std::uint16_t*, std::int64_t, const std::uint16_t*, std::int64_t, const float*,
                              float*, std::int64_t) {
  not_built();
}
void bf16gemm_onednn_bf16_bias(OneDnnMatmuls&, GemmShape, bool, bool, std::int64_t, std::int64_t, std::int64_t,
                               const std::uint16_t*, std::int64_t, const std::uint16_t*, std::int64_t, const float*,
                               std::uint16_t*, std::int64_t) {
  not_built();
}

}  // namespace gemm_detail
#endif

}  // namespace cleave::kernels::cpu

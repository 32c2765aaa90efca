// oneDNN's matmul as single-threaded GEMM kernels (gemm_kernels.hpp): f32 operands, and bf16 operands with f32
// accumulation (oneDNN's brgemm kernels use avx512_bf16 / AMX instructions where its ISA detection finds them).
//
// Single thread: oneDNN (built on OpenMP) sizes a primitive's work split from omp_get_max_threads() when the
// primitive is created, and may split k over threads (then the bits depend on the thread count). Every call here
// creates and runs its primitive with the calling task's OpenMP thread count set to 1 (outside any region, for the
// call only), so a primitive is always the single-thread one and gemm.cpp's slicing decides the threading, for
// every library alike.
//
// Primitives are cached by problem (sizes, strides, transposes, alpha, beta, dtypes) in the run's OneDnnMatmuls
// (onednn_matmuls.hpp), which the caller passes: creating one costs tens of microseconds, as much as a small GEMM.
// So are the objects a call needs around it (the steady-state rule: no allocation per call): each primitive keeps
// memory objects whose data handles a call rebinds (held by their C handles, their descriptors built in place: no
// shared_ptr or dims vector of the C++ API), each slot a stream and a user scratchpad (scratchpad_mode::user, sized
// from the primitive descriptors), and the primitive runs through oneDNN's C dnnl_primitive_execute on a fixed
// argument array. What execute allocates inside itself (its argument map and execution context) is oneDNN's.
// A GemmShape::kVarying problem (a grouped GEMM's group) leaves m and k out of its key: its primitive takes them at
// run time (DNNL_RUNTIME_DIM_VAL), so one primitive serves every row count routing produces. oneDNN 2.6 runs such
// a primitive on its gemm:jit kernels rather than brgemm (measured per call on the MoE expert shapes, 2-vCPU Zen 4:
// bf16 1.01-1.06x brgemm's time, f32 0.98-1.01x; an exact primitive costs ~160 us to make, more than such a GEMM),
// and its bits may differ from the exact primitive's: a kVarying GEMM's bits are a function of its shape, as every
// GEMM's are. Its memory objects carry the call's m and k, so a call whose sizes differ from its bindings' last
// remakes them (dnnl_memory_create: oneDNN's own posix_memalign, two per object; nothing of ours).
// Nothing here is process state.
#include "cleave/config.hpp"
#include "engine/core/error.hpp"
#include "kernels/cpu/gemm_backend.hpp"
#include "kernels/cpu/gemm_kernels.hpp"
#include "kernels/cpu/onednn_matmuls.hpp"

#if CLEAVE_WITH_ONEDNN
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <utility>
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

// A memory object held by its C handle. dnnl::memory would add a shared_ptr control block (an operator new) per
// object; a Memory costs only what oneDNN's dnnl_memory_create allocates inside itself (the object and its storage,
// through its own posix_memalign). Made with no buffer: a call binds its pointer (bind).
class Memory {
 public:
  Memory() = default;
  Memory(const dnnl_memory_desc_t& md, const dnnl::engine& engine) {
    dnnl::error::wrap_c_api(dnnl_memory_create(&handle_, &md, engine.get(), nullptr),
                            "could not create a memory object");
  }
  ~Memory() {
    if (handle_ != nullptr) dnnl_memory_destroy(handle_);
  }
  Memory(Memory&& o) noexcept : handle_(std::exchange(o.handle_, nullptr)) {}
  Memory& operator=(Memory&& o) noexcept {
    std::swap(handle_, o.handle_);
    return *this;
  }
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;

  void bind(const void* data) {
    dnnl::error::wrap_c_api(dnnl_memory_set_data_handle(handle_, const_cast<void*>(data)),
                            "could not set a memory object's data handle");
  }
  dnnl_memory_t get() const { return handle_; }

 private:
  dnnl_memory_t handle_ = nullptr;
};

// A cached primitive's memory objects, for one call at a time: a call rebinds their data handles and makes none. A
// kVarying primitive's A, B and C descriptors carry the call's m and k, so its bindings remake the objects whose
// sizes changed since their last call (oneDNN 2.x has no call that changes a memory object's descriptor: its md_
// is const): a grouped GEMM's group then pays oneDNN's dnnl_memory_create (two posix_memalign inside oneDNN per
// object), and nothing of ours (the descriptors are plain structs, the handles raw).
struct Bindings {
  Memory a, b, c, bias, scratchpad;
  std::int64_t m = -1, k = -1;  // the sizes a, b and c were made for (kVarying; the key's own when kExact)
};

struct Matmul {
  dnnl::matmul primitive;
  dnnl_memory_desc_t a, b, c, bias, scratchpad;
  std::vector<std::unique_ptr<Bindings>> free_bindings;  // those no call is using (under State::mutex)
  std::size_t bindings = 0;                              // made so far (free or in use)
};

// A 2-D descriptor built in place (dnnl::memory::desc takes its dims and strides as std::vectors: two operator new
// per descriptor).
dnnl_memory_desc_t plain_desc(std::int64_t rows, std::int64_t cols, dt type, std::int64_t row_stride,
                              std::int64_t col_stride) {
  dnnl_memory_desc_t md;
  const dnnl_dims_t dims = {rows, cols};
  const dnnl_dims_t strides = {row_stride, col_stride};
  dnnl::error::wrap_c_api(dnnl_memory_desc_init_by_strides(&md, 2, dims, dnnl::memory::convert_to_c(type), strides),
                          "could not make a memory descriptor");
  return md;
}

// Row-major storage; a transposed operand is the same memory read with swapped strides. m and k may be
// DNNL_RUNTIME_DIM_VAL (a primitive's descriptors) or the call's sizes (its memory objects).
dnnl_memory_desc_t a_desc(const ProblemKey& p, std::int64_t m, std::int64_t k) {
  return p.trans_a ? plain_desc(m, k, p.in, 1, p.lda) : plain_desc(m, k, p.in, p.lda, 1);
}
dnnl_memory_desc_t b_desc(const ProblemKey& p, std::int64_t k) {
  return p.trans_b ? plain_desc(k, p.n, p.in, 1, p.ldb) : plain_desc(k, p.n, p.in, p.ldb, 1);
}
dnnl_memory_desc_t c_desc(const ProblemKey& p, std::int64_t m) { return plain_desc(m, p.n, p.out, p.ldc, 1); }

Matmul make_matmul(const dnnl::engine& engine, const ProblemKey& p) {
  const bool varying = p.shape == GemmShape::kVarying;
  const std::int64_t m = varying ? DNNL_RUNTIME_DIM_VAL : p.m, k = varying ? DNNL_RUNTIME_DIM_VAL : p.k;
  const dnnl_memory_desc_t a = a_desc(p, m, k), b = b_desc(p, k), c = c_desc(p, m);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // each call brings its own (see run_matmul)
  if (p.alpha != 1.0f) attr.set_output_scales(0, {p.alpha});
  if (p.beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(p.beta);
    attr.set_post_ops(ops);
  }
  using md = dnnl::memory::desc;
  if (p.bias) {
    // oneDNN adds the bias to the f32 accumulator in the kernel's epilogue, before C is converted to its dtype:
    // C = round(A B + bias) in one pass, the same arithmetic as the product in f32 followed by a bias pass.
    const dnnl_memory_desc_t bias = plain_desc(1, p.n, dt::f32, p.n, 1);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md(a), md(b), md(bias), md(c)), attr, engine);
    return {dnnl::matmul(pd), a, b, c, bias, pd.scratchpad_desc().data, {}, 0};
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md(a), md(b), md(c)), attr, engine);
  return {dnnl::matmul(pd), a, b, c, {}, pd.scratchpad_desc().data, {}, 0};
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
std::unique_ptr<Bindings> make_bindings(const dnnl::engine& engine, const ProblemKey& key, const Matmul& mm,
                                        std::atomic<std::size_t>& made) {
  auto out = std::make_unique<Bindings>();
  made += (key.shape != GemmShape::kVarying ? 3 : 0) + (key.bias ? 1 : 0) + 1;
  if (key.shape != GemmShape::kVarying) {
    out->a = Memory(mm.a, engine);
    out->b = Memory(mm.b, engine);
    out->c = Memory(mm.c, engine);
    out->m = key.m;
    out->k = key.k;
  }
  if (key.bias) out->bias = Memory(mm.bias, engine);
  out->scratchpad = Memory(mm.scratchpad, engine);
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
  std::atomic<std::size_t> memory_objects{0};  // made so far (bind_sizes makes them outside the mutex)

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
      const std::size_t bytes = dnnl_memory_desc_get_size(&it->second.scratchpad);
      if (bytes > scratchpad_bytes) {
        scratchpad_bytes = bytes;
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
      mm.free_bindings.push_back(make_bindings(engine, key, mm, memory_objects));
    }
    if (mm.free_bindings.empty()) {
      mm.free_bindings.push_back(make_bindings(engine, key, mm, memory_objects));
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
std::size_t OneDnnMatmuls::memory_objects() const { return state_->memory_objects.load(); }

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
void bind_sizes(OneDnnMatmuls::State& state, const ProblemKey& key, std::int64_t m, std::int64_t k, Bindings& bind) {
  if (bind.m == m && bind.k == k) return;
  bind.a = Memory(a_desc(key, m, k), state.engine);
  if (bind.k != k) bind.b = Memory(b_desc(key, k), state.engine);
  if (bind.m != m) bind.c = Memory(c_desc(key, m), state.engine);
  state.memory_objects += 1 + (bind.k != k ? 1 : 0) + (bind.m != m ? 1 : 0);
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
  if (key.shape == GemmShape::kVarying) bind_sizes(state, key, m, k, bind);
  bind.a.bind(a);
  bind.b.bind(b);
  bind.c.bind(c);
  bind.scratchpad.bind(lease.slot->scratchpad.data());
  dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, bind.a.get()},
                             {DNNL_ARG_WEIGHTS, bind.b.get()},
                             {DNNL_ARG_DST, bind.c.get()},
                             {DNNL_ARG_SCRATCHPAD, bind.scratchpad.get()},
                             {DNNL_ARG_BIAS, nullptr}};
  int nargs = 4;
  if (key.bias) {
    bind.bias.bind(bias);
    args[nargs++].memory = bind.bias.get();
  }
  dnnl::stream& stream = lease.slot->stream;
  dnnl::error::wrap_c_api(dnnl_primitive_execute(lease.matmul->primitive.get(), stream.get(), nargs, args),
                          "could not execute a primitive");
  stream.wait();
}

// Sets the calling thread's OpenMP thread count (its nthreads-var, omp_set_num_threads) for a scope.
class ThreadsSetting {
 public:
  explicit ThreadsSetting(int threads) : previous_(omp_get_max_threads()) { omp_set_num_threads(threads); }
  ~ThreadsSetting() { omp_set_num_threads(previous_); }
  ThreadsSetting(const ThreadsSetting&) = delete;
  ThreadsSetting& operator=(const ThreadsSetting&) = delete;

 private:
  int previous_;
};

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
    // Outside any active region: the calling thread's own setting, set to 1 for the call and put back however it
    // ends. (A one-thread region, as before, gives oneDNN the same single-thread view, omp_in_parallel() false
    // included, but libgomp mallocs a team for each one-thread region it starts: a C allocation per call.)
    const ThreadsSetting one_thread(1);
    run_matmul(state, key, /*team=*/1, p.m, p.k, a, b, c, bias);
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
std::size_t OneDnnMatmuls::memory_objects() const { return 0; }

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

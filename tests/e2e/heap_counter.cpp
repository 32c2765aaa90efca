// The replaced global operator new and delete of the steady-state test binaries and the owner of each allocation
// (heap_counter.hpp). Allocations go to malloc / aligned_alloc as the default ones do; only the counting is added.
// Classes come from backtrace() and dladdr(), neither of which calls operator new; each return address's class is
// remembered in a fixed table (dladdr scans an object's symbols), and a thread's own guard keeps an allocation made
// while classifying (none expected) from recursing. An engine allocation's site (its innermost frames of ours) is
// counted in a second fixed table (one with no room left counts it as unsited), named only when sites() is asked,
// after counting; owners are read from the named sites (by_owner), never while counting. C allocations
// (c_alloc_counter.cpp, where linked) are charged to classes the same way, in a table of their own; operator new
// takes its blocks from glibc's __libc_malloc so that they are not counted twice.
#include "heap_counter.hpp"

#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <string_view>
#include <utility>

// glibc's own allocator, which operator new calls directly: where c_alloc_counter.cpp replaces malloc, the block
// under an operator new is not counted again as a C allocation.
extern "C" void* __libc_malloc(std::size_t bytes) noexcept;
extern "C" void* __libc_memalign(std::size_t align, std::size_t bytes) noexcept;
// Defined by c_alloc_counter.cpp: null in a binary that does not link it.
extern "C" __attribute__((weak)) int cleave_c_alloc_counter_linked();

namespace cleave::testing::heap {
namespace {

enum class Frame : std::uint8_t { kUnknown, kOther, kKernels, kEngine, kOneDnnExecute, kOneDnn, kMpi };
// kOneDnn: C allocations only (inside oneDNN, outside its execute)
enum Class { kKernels, kEngine, kUnnamed, kOneDnnExecute, kMpi, kUnsited, kOneDnn, kClasses };

std::atomic<bool> g_armed{false};
std::atomic<std::int64_t> g_counts[kClasses];
std::atomic<std::int64_t> g_c_counts[kClasses];  // C allocations (c_alloc_counter.cpp)
std::atomic<std::int64_t> g_c_trace_left{0};
std::atomic<std::int64_t> g_trace_left{0};
thread_local bool t_inside = false;

// Return address -> class, open addressing; a full table just stops remembering.
constexpr std::size_t kSlots = 1 << 16;
void* g_addresses[kSlots];
Frame g_classes[kSlots];
std::atomic_flag g_table_lock = ATOMIC_FLAG_INIT;

bool starts(const char* s, const char* prefix) {
  return s != nullptr && std::strncmp(s, prefix, std::strlen(prefix)) == 0;
}
bool has(const char* s, const char* part) { return s != nullptr && std::strstr(s, part) != nullptr; }

Frame classify_uncached(void* address) {
  Dl_info info{};
  if (dladdr(address, &info) == 0) return Frame::kOther;
  const char* file = info.dli_fname;
  if (has(file, "libmpi") || has(file, "libopen-pal") || has(file, "libopen-rte") || has(file, "pmix") ||
      has(file, "libucp") || has(file, "libucs")) {
    return Frame::kMpi;
  }
  const char* name = info.dli_sname;
  // The counter's own frames (count_c_allocation and its helpers) are not an owner; probe() is the engine's on purpose.
  if (starts(name, "_ZN6cleave7testing4heap") && !starts(name, "_ZN6cleave7testing4heap5probe")) return Frame::kOther;
  if (name != nullptr && std::strcmp(name, "dnnl_primitive_execute") == 0) return Frame::kOneDnnExecute;
  if (has(file, "libdnnl")) return Frame::kOneDnn;
  for (const char* kernel : {"_ZN6cleave7kernels", "_ZNK6cleave7kernels", "_ZN6cleave3ops10cpu_detail",
                             "_ZNK6cleave3ops10cpu_detail"}) {
    if (starts(name, kernel)) return Frame::kKernels;
  }
  if (starts(name, "_ZN6cleave") || starts(name, "_ZNK6cleave") || starts(name, "_ZZN6cleave") ||
      starts(name, "_ZZNK6cleave")) {
    return Frame::kEngine;
  }
  return Frame::kOther;
}

Frame classify(void* address) {
  std::size_t slot = (reinterpret_cast<std::uintptr_t>(address) >> 2) % kSlots;
  while (g_table_lock.test_and_set(std::memory_order_acquire)) {
  }
  for (std::size_t probe = 0; probe < 64; ++probe, slot = (slot + 1) % kSlots) {
    if (g_addresses[slot] == address) {
      const Frame known = g_classes[slot];
      g_table_lock.clear(std::memory_order_release);
      return known;
    }
    if (g_addresses[slot] == nullptr) break;
  }
  const Frame found = classify_uncached(address);
  if (g_addresses[slot] == nullptr) {
    g_addresses[slot] = address;
    g_classes[slot] = found;
  }
  g_table_lock.clear(std::memory_order_release);
  return found;
}

// Engine allocation sites: the innermost kSiteDepth return addresses of ours -> count; with no room left (256
// probes) an allocation is counted as unsited instead.
constexpr int kSiteDepth = 12;
constexpr std::size_t kSiteSlots = 1 << 12;
struct SiteSlot {
  void* frames[kSiteDepth];
  std::int64_t count;
};
SiteSlot g_sites[kSiteSlots];
std::atomic_flag g_sites_lock = ATOMIC_FLAG_INIT;

void count_site(void* const* frames, int n) {
  void* ours[kSiteDepth] = {};
  int k = 0;
  for (int i = 0; i < n && k < kSiteDepth; ++i) {
    const Frame f = classify(frames[i]);
    if (f == Frame::kEngine || f == Frame::kKernels) ours[k++] = frames[i];
  }
  std::uintptr_t hash = 0;
  for (void* f : ours) hash = hash * 1000003u ^ reinterpret_cast<std::uintptr_t>(f);
  std::size_t slot = (hash >> 3) % kSiteSlots;
  while (g_sites_lock.test_and_set(std::memory_order_acquire)) {
  }
  bool sited = false;
  for (std::size_t probe = 0; probe < 256 && !sited; ++probe, slot = (slot + 1) % kSiteSlots) {
    SiteSlot& s = g_sites[slot];
    if (s.count == 0) std::copy(ours, ours + kSiteDepth, s.frames);
    if (std::equal(ours, ours + kSiteDepth, s.frames)) {
      ++s.count;
      sited = true;
    }
  }
  g_sites_lock.clear(std::memory_order_release);
  if (!sited) g_counts[kUnsited].fetch_add(1, std::memory_order_relaxed);
}

std::string frame_name(void* address) {
  Dl_info info{};
  if (dladdr(address, &info) == 0 || info.dli_sname == nullptr) {
    char hex[32];
    std::snprintf(hex, sizeof hex, "%p", address);
    return hex;
  }
  int status = 0;
  char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled != nullptr ? demangled : info.dli_sname;
  std::free(demangled);
  return name;
}

Class class_of(void* const* frames, int n) {
  Frame first_ours = Frame::kUnknown;
  for (int i = 0; i < n; ++i) {
    const Frame f = classify(frames[i]);
    if (f == Frame::kOneDnnExecute) return kOneDnnExecute;
    if (f == Frame::kMpi) return kMpi;
    if (first_ours == Frame::kUnknown && (f == Frame::kKernels || f == Frame::kEngine)) first_ours = f;
  }
  if (first_ours == Frame::kKernels) return kKernels;
  if (first_ours == Frame::kEngine) return kEngine;
  return kUnnamed;
}

// A C allocation's class: as class_of, but one made in oneDNN (a libdnnl frame before any of ours) outside its
// execute is oneDNN's own (kOneDnn).
Class c_class_of(void* const* frames, int n) {
  bool in_onednn = false;
  for (int i = 0; i < n; ++i) {
    const Frame f = classify(frames[i]);
    if (f == Frame::kOneDnnExecute) return kOneDnnExecute;
    if (f == Frame::kMpi) return kMpi;
    if (f == Frame::kOneDnn) in_onednn = true;
    if (f == Frame::kKernels || f == Frame::kEngine) {
      if (in_onednn) return kOneDnn;
      return f == Frame::kKernels ? kKernels : kEngine;
    }
  }
  return in_onednn ? kOneDnn : kUnnamed;
}

void trace(const char* what, void* const* frames, int n) {
  char line[64];
  const int len = std::snprintf(line, sizeof line, "--- %s\n", what);
  if (write(2, line, static_cast<std::size_t>(len)) < 0) {
    // nothing to do: tracing is best effort
  }
  backtrace_symbols_fd(frames, n, 2);
}

void count(std::size_t bytes) {
  if (!g_armed.load(std::memory_order_relaxed) || t_inside) return;
  t_inside = true;
  void* frames[64];
  const int n = backtrace(frames, 64);
  const Class cls = class_of(frames, n);
  g_counts[cls].fetch_add(1, std::memory_order_relaxed);
  if (cls == kEngine) count_site(frames, n);
  if (cls != kOneDnnExecute && cls != kMpi && g_trace_left.fetch_sub(1, std::memory_order_relaxed) > 0) {
    char what[64];
    std::snprintf(what, sizeof what, "allocation of %zu bytes", bytes);
    trace(what, frames, n);
  }
  t_inside = false;
}

}  // namespace

void count_c_allocation() {
  if (!g_armed.load(std::memory_order_relaxed) || t_inside) return;
  t_inside = true;
  void* frames[64];
  const int n = backtrace(frames, 64);
  const Class cls = c_class_of(frames, n);
  g_c_counts[cls].fetch_add(1, std::memory_order_relaxed);
  if ((cls == kKernels || cls == kOneDnn) && g_c_trace_left.fetch_sub(1, std::memory_order_relaxed) > 0) {
    trace(cls == kOneDnn ? "C allocation inside oneDNN" : "C allocation in the kernel layer", frames, n);
  }
  t_inside = false;
}

namespace {

void* allocate(std::size_t bytes, std::size_t align) {
  count(bytes);
  if (bytes == 0) bytes = 1;
  return align <= alignof(std::max_align_t) ? __libc_malloc(bytes) : __libc_memalign(align, bytes);
}

}  // namespace

std::string Counts::str() const {
  return std::to_string(kernels) + " in the kernel layer, " + std::to_string(engine) + " elsewhere in the engine, " +
         std::to_string(unnamed) + " unnamed, " + std::to_string(onednn_execute) + " inside oneDNN's execute, " +
         (onednn != 0 ? std::to_string(onednn) + " inside oneDNN outside its execute, " : std::string()) +
         std::to_string(mpi) + " inside MPI" + (unsited > 0 ? ", " + std::to_string(unsited) + " unsited" : "");
}

std::string Site::str(std::size_t depth) const {
  std::string out;
  for (std::size_t i = 0; i < frames.size() && i < depth; ++i) {
    out += (i > 0 ? " < " : "") + frames[i].substr(0, frames[i].find('('));  // the name without its parameters
  }
  return out;
}

std::vector<Site> sites() {
  std::vector<Site> out;
  for (const SiteSlot& s : g_sites) {
    if (s.count == 0) continue;
    Site site{s.count, {}};
    for (void* f : s.frames) {
      if (f != nullptr) site.frames.push_back(frame_name(f));
    }
    out.push_back(std::move(site));
  }
  std::sort(out.begin(), out.end(), [](const Site& a, const Site& b) { return a.count > b.count; });
  return out;
}

void start() {
  for (auto& c : g_counts) c.store(0);
  for (auto& c : g_c_counts) c.store(0);
  const char* c_trace = std::getenv("CLEAVE_HEAP_TRACE_C");
  g_c_trace_left.store(c_trace != nullptr ? std::atoll(c_trace) : 0);
  for (SiteSlot& s : g_sites) s = SiteSlot{};
  const char* trace = std::getenv("CLEAVE_HEAP_TRACE");
  g_trace_left.store(trace != nullptr ? std::atoll(trace) : 0);
  void* warm[1];
  backtrace(warm, 1);  // loads the unwinder before counting starts
  g_armed.store(true);
}

Counts stop() {
  g_armed.store(false);
  return Counts{g_counts[kKernels].load(), g_counts[kEngine].load(),        g_counts[kUnnamed].load(),
                g_counts[kOneDnnExecute].load(), g_counts[kMpi].load(), g_counts[kUnsited].load()};
}

std::optional<Counts> c_allocations() {
  if (cleave_c_alloc_counter_linked == nullptr) return std::nullopt;
  Counts c{g_c_counts[kKernels].load(), g_c_counts[kEngine].load(), g_c_counts[kUnnamed].load(),
           g_c_counts[kOneDnnExecute].load(), g_c_counts[kMpi].load()};
  c.onednn = g_c_counts[kOneDnn].load();
  return c;
}

__attribute__((noinline)) void probe() {
  void* volatile p = ::operator new(1);  // an explicit call: not elided
  ::operator delete(p);
}

Owner probe_owner() { return {"the counter's probe (one allocation, expected)", {"testing::heap::probe"}, Hold::kNever}; }

ByOwner by_owner(const std::vector<Site>& sites, const std::vector<Owner>& owners) {
  ByOwner out{std::vector<std::int64_t>(owners.size() + 1, 0), std::vector<std::string>(owners.size() + 1)};
  for (const Site& site : sites) {
    std::size_t owner = owners.size();
    for (std::size_t f = 0; f < site.frames.size() && owner == owners.size(); ++f) {
      const std::string& frame = site.frames[f];
      const std::string_view name(frame.data(), std::min(frame.find('('), frame.size()));  // not the parameters
      for (std::size_t i = 0; i < owners.size() && owner == owners.size(); ++i) {
        for (const char* part : owners[i].parts) {
          if (name.find(part) != std::string_view::npos) {
            owner = i;
            break;
          }
        }
      }
    }
    out.count[owner] += site.count;
    if (out.example[owner].empty()) out.example[owner] = site.str(6);
  }
  return out;
}

void print_largest_sites(const std::vector<Site>& sites) {
  const char* n = std::getenv("CLEAVE_HEAP_SITES");
  if (n == nullptr) return;
  const char* depth = std::getenv("CLEAVE_HEAP_SITE_DEPTH");
  std::map<std::string, std::int64_t> grouped;
  for (const Site& s : sites) grouped[s.str(depth != nullptr ? std::stoul(depth) : 1)] += s.count;
  std::vector<std::pair<std::int64_t, std::string>> largest;
  for (const auto& [site, count] : grouped) largest.emplace_back(count, site);
  std::sort(largest.rbegin(), largest.rend());
  for (std::size_t i = 0; i < largest.size() && i < std::stoul(n); ++i) {
    std::printf("    %6lld  %s\n", static_cast<long long>(largest[i].first), largest[i].second.c_str());
  }
}

}  // namespace cleave::testing::heap

namespace heap = cleave::testing::heap;

void* operator new(std::size_t n) {
  if (void* p = heap::allocate(n, 0)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return heap::allocate(n, 0); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return heap::allocate(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) {
  if (void* p = heap::allocate(n, static_cast<std::size_t>(a))) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) { return ::operator new(n, a); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return heap::allocate(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return heap::allocate(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }

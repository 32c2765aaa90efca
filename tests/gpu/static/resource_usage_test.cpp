// What the compiler made of every CUDA kernel, checked without a GPU (label cuda-static, in `make test`): for each
// .cu object of cleave_cuda and cleave_nccl, ptxas's resource report (kept beside the object by the build's
// launcher, cmake/cuda_resource_log.sh) and the object's fatbinary. Fails on
//  - a register spill (spill stores or loads), or local memory (a stack frame) beyond the one kernel allowed it
//    below, with its bytes;
//  - static shared memory over 48 KiB (more needs an opt-in no launcher makes);
//  - registers x block threads over an SM's register file (the launch would fail "too many resources requested"):
//    block sizes from kernels/cuda/launch_config.hpp's catalogue, which must name every compiled kernel;
//  - a kernel without an image for sm_90 or for any real architecture in CMAKE_CUDA_ARCHITECTURES, in ptxas's
//    report or in the object's fatbinary (an H100 would JIT the kernels from PTX at start-up, or fail).
// Compiled objects only: nothing here runs a kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda/launch_config.hpp"

#ifndef CLEAVE_CUDA_OBJECTS
#error "CLEAVE_CUDA_OBJECTS (the list of CUDA objects) is defined by tests/gpu/CMakeLists.txt"
#endif

namespace cleave::testing::resource_usage_test {
namespace {

constexpr int64_t kStaticSmemLimit = 48 * 1024;
constexpr int64_t kRegistersPerSm = 64 * 1024;  // sm_80 and sm_90: 64K 32-bit registers per SM, at most per block

// Local memory allowed, with the reason; any other kernel with a stack frame fails.
struct LocalMemoryAllowance {
  const char* kernel;
  int64_t bytes;
  const char* why;
};
constexpr LocalMemoryAllowance kLocalMemoryAllowed[] = {
    {"ordered_reduce_kernel", 256,
     "engine/comm/nccl/ordered_reduce.cu: a per-thread stack of 32 partial sums and sizes indexed at run time (the "
     "rank-ordered tree of deterministic NCCL reductions), one pass per gradient bucket"},
    {"sum_squares_exact_kernel", 160,
     "kernels/cuda/sum_squares_exact.cu: a per-thread exact accumulator (base-2^32 digits, the digit chosen by each "
     "square's exponent at run time) for the order-independent gradient norm, once per step"},
};

struct KernelReport {
  std::string mangled;
  int arch = 0;  // 80 for sm_80
  int64_t registers = -1;
  int64_t smem = 0;
  int64_t stack = 0;  // bytes of local memory per thread (stack frame, or cumulative stack with callees)
  int64_t spill_stores = 0;
  int64_t spill_loads = 0;
};

int64_t number_before(const std::string& line, const std::string& what) {
  const std::regex re("(\\d+) " + what);
  std::smatch m;
  return std::regex_search(line, m, re) ? std::stoll(m[1].str()) : 0;
}

// ptxas --resource-usage output: "Compiling entry function 'NAME' for 'sm_NN'" opens a kernel; the stack /
// spill line after any "Function properties" and the "Used ..." line belong to the kernel last opened.
std::vector<KernelReport> parse_report(const std::string& path) {
  std::ifstream in(path);
  std::vector<KernelReport> kernels;
  const std::regex entry("Compiling entry function '([^']+)' for 'sm_(\\d+)'");
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, entry)) {
      KernelReport k;
      k.mangled = m[1].str();
      k.arch = std::stoi(m[2].str());
      kernels.push_back(k);
      continue;
    }
    if (kernels.empty()) continue;
    KernelReport& k = kernels.back();
    if (line.find("bytes stack frame") != std::string::npos) {
      k.stack = std::max(k.stack, number_before(line, "bytes stack frame"));
      k.spill_stores += number_before(line, "bytes spill stores");
      k.spill_loads += number_before(line, "bytes spill loads");
    } else if (line.find(" registers") != std::string::npos && line.find("Used ") != std::string::npos) {
      k.registers = number_before(line, "registers");
      k.smem = number_before(line, "bytes smem");
      k.stack = std::max({k.stack, number_before(line, "bytes lmem"), number_before(line, "bytes cumulative stack size")});
    }
  }
  return kernels;
}

// The architectures of the machine-code (ELF) images in an object's fatbinary (section .nv_fatbin of the host
// ELF object): fatbinary header {u32 magic 0xBA55ED50, u16 version, u16 header size, u64 size}, then entries
// {u16 kind (1 PTX, 2 ELF), u16, u32 header size, u64 size, ..., u32 architecture at offset 28}.
std::set<int> fatbin_elf_archs(const std::string& object, std::string& error) {
  std::ifstream in(object, std::ios::binary);
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto u16 = [&](std::size_t at) { std::uint16_t v; std::memcpy(&v, data.data() + at, 2); return v; };
  auto u32 = [&](std::size_t at) { std::uint32_t v; std::memcpy(&v, data.data() + at, 4); return v; };
  auto u64 = [&](std::size_t at) { std::uint64_t v; std::memcpy(&v, data.data() + at, 8); return v; };
  std::set<int> archs;
  if (data.size() < 64 || data.compare(0, 4, "\x7f" "ELF") != 0 || data[4] != 2) {
    error = "not a 64-bit ELF object";
    return archs;
  }
  const std::uint64_t shoff = u64(0x28);
  const std::uint16_t shentsize = u16(0x3a), shnum = u16(0x3c), shstrndx = u16(0x3e);
  if (shoff + std::uint64_t{shnum} * shentsize > data.size() || shstrndx >= shnum) {
    error = "truncated section table";
    return archs;
  }
  auto section = [&](int i) { return shoff + static_cast<std::uint64_t>(i) * shentsize; };
  const std::uint64_t names = u64(section(shstrndx) + 0x18);
  for (int i = 0; i < shnum; ++i) {
    const std::string name(data.c_str() + names + u32(section(i)));
    if (name != ".nv_fatbin") continue;
    const std::uint64_t begin = u64(section(i) + 0x18), size = u64(section(i) + 0x20);
    std::uint64_t at = begin;
    while (at + 16 <= begin + size) {  // one or more fatbinaries, each with its entries
      if (u32(at) != 0xBA55ED50u) break;
      const std::uint64_t header = u16(at + 6), total = u64(at + 8);
      std::uint64_t e = at + header;
      while (e + 32 <= at + header + total) {
        const std::uint16_t kind = u16(e);
        const std::uint32_t entry_header = u32(e + 4);
        const std::uint64_t entry_size = u64(e + 8);
        if (kind == 2) archs.insert(static_cast<int>(u32(e + 28)));
        e += entry_header + entry_size;
      }
      at += header + total;
    }
    return archs;
  }
  error = "no .nv_fatbin section";
  return archs;
}

std::vector<std::string> cu_objects() {
  std::ifstream in(CLEAVE_CUDA_OBJECTS);
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > 5 && line.compare(line.size() - 5, 5, ".cu.o") == 0) out.push_back(line);
  }
  return out;
}

// Real architectures the build was asked for (CMAKE_CUDA_ARCHITECTURES with commas: "80,90", "90-real";
// "-virtual" entries have no machine code).
std::set<int> required_archs() {
  std::set<int> archs{90};  // the GPU the project targets (H100) always
  std::stringstream list(CLEAVE_CUDA_ARCHITECTURES);
  std::string entry;
  while (std::getline(list, entry, ',')) {
    if (entry.empty() || entry.find("virtual") != std::string::npos) continue;
    archs.insert(std::stoi(entry));
  }
  return archs;
}

// The catalogue's name inside a mangled kernel name (<length><name>), or "" when it names none of them.
std::string kernel_name(const std::string& mangled, int64_t& threads) {
  const std::vector<kernels::cuda::KernelLaunch> catalogue = kernels::cuda::launch::kernel_launches({});
  for (const auto& k : catalogue) {
    if (mangled.find(std::to_string(k.kernel.size()) + k.kernel) != std::string::npos) {
      threads = k.config.block.count();
      return k.kernel;
    }
  }
  return "";
}

// Registers a block of `threads` occupies: per warp, registers x 32 rounded up to the 256-register allocation unit.
int64_t block_registers(int64_t registers, int64_t threads) {
  const int64_t warps = (threads + 31) / 32;
  const int64_t per_warp = (registers * 32 + 255) / 256 * 256;
  return warps * per_warp;
}

TEST(CudaResources, EveryKernelHasNoSpillNoLocalMemoryAndFitsItsLaunch) {
  const std::vector<std::string> objects = cu_objects();
  ASSERT_FALSE(objects.empty()) << "no .cu objects listed in " << CLEAVE_CUDA_OBJECTS;
  int kernels_checked = 0;
  for (const std::string& object : objects) {
    SCOPED_TRACE(object);
    const std::string report = object + ".resource-usage";
    if (!std::ifstream(report)) {
      ADD_FAILURE() << "no ptxas report " << report << ": the object was built without cmake/cuda_resource_log.sh "
                    << "(the CUDA_COMPILER_LAUNCHER of cmake/CleaveCuda.cmake); reconfigure and rebuild";
      continue;
    }
    const std::vector<KernelReport> kernels = parse_report(report);
    EXPECT_FALSE(kernels.empty()) << report << " names no kernel: was it compiled with --resource-usage?";
    for (const KernelReport& k : kernels) {
      int64_t threads = 0;
      const std::string name = kernel_name(k.mangled, threads);
      const std::string what = (name.empty() ? k.mangled : name) + " (sm_" + std::to_string(k.arch) + ")";
      EXPECT_FALSE(name.empty()) << k.mangled << " is in no catalogue: add it to kernel_launches in "
                                 << "kernels/cuda/launch_config.hpp";
      EXPECT_GE(k.registers, 0) << what << ": no \"Used N registers\" line in " << report;
      EXPECT_EQ(k.spill_stores + k.spill_loads, 0) << what << " spills registers: " << k.spill_stores
                                                   << " bytes of stores, " << k.spill_loads << " of loads";
      int64_t allowed = 0;
      for (const auto& a : kLocalMemoryAllowed) {
        if (name == a.kernel) allowed = a.bytes;
      }
      EXPECT_LE(k.stack, allowed) << what << " uses " << k.stack << " bytes of local memory per thread (allowed: "
                                  << allowed << "); keep per-thread arrays indexed at compile time, or add the "
                                  << "kernel to kLocalMemoryAllowed with its reason";
      EXPECT_LE(k.smem, kStaticSmemLimit) << what << " has " << k.smem << " bytes of static shared memory";
      EXPECT_LE(k.registers, 255) << what;
      if (threads > 0) {
        EXPECT_LE(block_registers(k.registers, threads), kRegistersPerSm)
            << what << ": " << k.registers << " registers x " << threads << " threads per block exceed an SM's "
            << kRegistersPerSm << " registers";
      }
      ++kernels_checked;
    }
  }
  std::printf("[ cuda ] %d kernel images checked in %zu objects\n", kernels_checked, objects.size());
  EXPECT_GE(kernels_checked, 2 * 50) << "fewer kernel images than the 50 kernels of kernels/cuda for two archs";
}

TEST(CudaResources, EveryKernelHasMachineCodeForSm90AndEachRealArchitecture) {
  const std::set<int> required = required_archs();
  const std::vector<std::string> objects = cu_objects();
  ASSERT_FALSE(objects.empty()) << "no .cu objects listed in " << CLEAVE_CUDA_OBJECTS;
  for (const std::string& object : objects) {
    SCOPED_TRACE(object);
    std::string error;
    const std::set<int> images = fatbin_elf_archs(object, error);
    ASSERT_TRUE(error.empty()) << object << ": " << error;
    for (int arch : required) {
      EXPECT_TRUE(images.count(arch) == 1) << object << " has no sm_" << arch << " machine-code image in its "
                                           << "fatbinary (CMAKE_CUDA_ARCHITECTURES \"" << CLEAVE_CUDA_ARCHITECTURES
                                           << "\"; sm_90 is always required)";
    }
    const std::vector<KernelReport> kernels = parse_report(object + ".resource-usage");
    std::map<std::string, std::set<int>> archs_of;
    for (const KernelReport& k : kernels) archs_of[k.mangled].insert(k.arch);
    for (const auto& [mangled, archs] : archs_of) {
      for (int arch : required) {
        EXPECT_TRUE(archs.count(arch) == 1) << mangled << ": ptxas made no sm_" << arch << " code";
      }
    }
  }
}

// The parser on a report as ptxas 13 writes it (one kernel, then a non-inlined callee) and on a spilling one.
TEST(CudaResources, ParsesPtxasReports) {
  const std::string path = ::testing::TempDir() + "/ptxas_report.txt";
  {
    std::ofstream out(path);
    out << "ptxas info    : 0 bytes gmem\n"
           "ptxas info    : Compiling entry function '_Z12count_kernelPKil' for 'sm_90'\n"
           "ptxas info    : Function properties for _Z12count_kernelPKil\n"
           "    32 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
           "ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem, 32 bytes cumulative stack size\n"
           "ptxas info    : Compile time = 44.458 ms\n"
           "ptxas info    : Function properties for __internal_accurate_pow\n"
           "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
           "ptxas info    : Compiling entry function '_Z11scan_kernelPi' for 'sm_80'\n"
           "ptxas info    : Used 12 registers, used 0 barriers, 380 bytes cmem[0]\n";
  }
  const std::vector<KernelReport> k = parse_report(path);
  ASSERT_EQ(k.size(), 2u);
  EXPECT_EQ(k[0].arch, 90);
  EXPECT_EQ(k[0].registers, 40);
  EXPECT_EQ(k[0].smem, 2048);
  EXPECT_EQ(k[0].stack, 32);
  EXPECT_EQ(k[0].spill_stores, 8);
  EXPECT_EQ(k[0].spill_loads, 4);
  EXPECT_EQ(k[1].arch, 80);
  EXPECT_EQ(k[1].registers, 12);
  EXPECT_EQ(k[1].smem, 0);
  EXPECT_EQ(k[1].stack, 0);
  int64_t threads = 0;
  EXPECT_EQ(kernel_name("_ZN6cleave7kernels4cuda6detail12scan_kernelEPKiPi", threads), "");  // "12" != 11 chars
  EXPECT_EQ(kernel_name("_ZN6cleave7kernels4cuda6detail11scan_kernelEPKiPi", threads), "scan_kernel");
  EXPECT_EQ(threads, kernels::cuda::launch::kScanThreads);
  EXPECT_EQ(block_registers(64, 1024), kRegistersPerSm);
  EXPECT_GT(block_registers(65, 1024), kRegistersPerSm);
}

}  // namespace
}  // namespace cleave::testing::resource_usage_test

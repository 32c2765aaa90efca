// See blas_coretype.hpp.
#include "kernels/cpu/blas_coretype.hpp"

#include <cctype>
#include <cstdio>
#include <cstdlib>

#include <unistd.h>
#include <utility>

#include <fmt/format.h>

#include "kernels/cpu/blas_runtime.hpp"

namespace cleave::kernels::cpu {
namespace {

bool same_name(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

// OpenBLAS 0.3.22 fixed OPENBLAS_CORETYPE=Cooperlake in DYNAMIC_ARCH builds (0.3.21: "Core not found").
constexpr int kCooperlakeForcibleFrom = 3022;

struct Target {
  std::string name;
  int level = -1;
  std::string why;  // the CPU features that allow it
};

// The best core this CPU allows that this OpenBLAS version can be told to use; level -1 when none applies.
Target best_core(const CpuFeatures& cpu, std::optional<int> version) {
  if (cpu.avx512_common()) {
    if (cpu.avx512_bf16 && version && *version >= kCooperlakeForcibleFrom) {
      return {"Cooperlake", 4, "AVX-512 with avx512_bf16"};
    }
    // OpenBLAS before 0.3.22 cannot be told Cooperlake: SkylakeX is the best it takes on a bf16 CPU.
    return {"SkylakeX", 3, cpu.avx512_bf16 ? "AVX-512 with avx512_bf16" : "AVX-512"};
  }
  if (cpu.avx2 && cpu.fma) return {cpu.is_amd() ? "Zen" : "Haswell", 2, "AVX2 and FMA"};
  if (cpu.avx) return {cpu.is_amd() ? "Bulldozer" : "Sandybridge", 1, "AVX"};
  return {};
}

BlasCoretypeDecision keep(std::string message) { return {BlasCoretypeAction::kKeep, {}, std::move(message)}; }
BlasCoretypeDecision warn(std::string message) { return {BlasCoretypeAction::kWarn, {}, std::move(message)}; }

}  // namespace

std::optional<int> openblas_core_level(std::string_view core) {
  static constexpr std::pair<const char*, int> kLevels[] = {
      {"Unknown", 0},     {"Katmai", 0},     {"Coppermine", 0},     {"Northwood", 0},      {"Prescott", 0},
      {"Banias", 0},      {"Atom", 0},       {"Core2", 0},          {"Penryn", 0},         {"Dunnington", 0},
      {"Nehalem", 0},     {"Athlon", 0},     {"Opteron", 0},        {"Opteron_SSE3", 0},   {"Barcelona", 0},
      {"Nano", 0},        {"Bobcat", 0},     {"Sandybridge", 1},    {"Bulldozer", 1},      {"Piledriver", 1},
      {"Steamroller", 1}, {"Haswell", 2},    {"Excavator", 2},      {"Zen", 2},            {"SkylakeX", 3},
      {"Cooperlake", 4},  {"SapphireRapids", 5},
  };
  for (const auto& [name, level] : kLevels) {
    if (same_name(core, name)) return level;
  }
  return std::nullopt;
}

std::optional<int> openblas_version(std::string_view config) {
  constexpr std::string_view kPrefix = "OpenBLAS ";
  if (config.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  const std::string text(config.substr(kPrefix.size()));
  int major = -1, minor = -1, patch = -1;
  if (std::sscanf(text.c_str(), "%d.%d.%d", &major, &minor, &patch) != 3 || major != 0 || minor < 0 || patch < 0) {
    return std::nullopt;
  }
  return minor * 1000 + patch;
}

BlasCoretypeDecision decide_blas_coretype(const BlasCoretypeInputs& in) {
  const std::string_view config = in.blas_config;
  if (config.substr(0, 9) != "OpenBLAS ") {
    return keep(fmt::format("BLAS \"{}\" is not OpenBLAS: nothing to correct", in.blas_config));
  }
  if (in.cpu.vendor.empty()) return keep("not an x86-64 CPU: OpenBLAS's own choice of core is kept");
  const std::optional<int> version = openblas_version(config);
  const Target target = best_core(in.cpu, version);
  const std::optional<int> level = openblas_core_level(in.core_name);
  const bool older = target.level >= 0 && level && *level < target.level;
  const std::string cpu_line = fmt::format("{} family {} model {}", in.cpu.vendor, in.cpu.family, in.cpu.model);

  if (in.env_marker) {
    const std::string asked = in.env_coretype.value_or("");
    if (same_name(in.core_name, asked)) {
      return keep(fmt::format("OpenBLAS kernels: {}, set by Cleave (OPENBLAS_CORETYPE={}; the library chose {} for "
                              "{}: {}; CLEAVE_BLAS_CORETYPE=keep turns this off)",
                              in.core_name, asked, *in.env_marker, cpu_line, target.why));
    }
    return warn(fmt::format("OpenBLAS kernels: {}: OPENBLAS_CORETYPE={} had no effect ({}); this CPU ({}) allows {}, "
                            "so GEMMs run slower than they could: install an OpenBLAS that knows this CPU "
                            "(docs/ops.md, \"The CPU runtime\")",
                            in.core_name, asked, in.blas_config, cpu_line, target.name));
  }
  if (in.env_coretype) {
    if (older) {
      return warn(fmt::format("OpenBLAS kernels: {} from OPENBLAS_CORETYPE={} in the environment, older than the {} "
                              "this CPU allows ({}: {}): unset OPENBLAS_CORETYPE to let Cleave choose",
                              in.core_name, *in.env_coretype, target.name, cpu_line, target.why));
    }
    return keep(fmt::format("OpenBLAS kernels: {} (OPENBLAS_CORETYPE={} from the environment)", in.core_name,
                            *in.env_coretype));
  }
  const std::string choice = in.env_switch.value_or("auto");
  if (!same_name(choice, "auto") && !same_name(choice, "keep")) {
    return warn(fmt::format("CLEAVE_BLAS_CORETYPE={} is neither \"auto\" nor \"keep\"; OpenBLAS's own choice {} is "
                            "kept (set auto to let Cleave correct it, or OPENBLAS_CORETYPE to force a core)",
                            choice, in.core_name));
  }
  if (!older) {
    return keep(fmt::format("OpenBLAS kernels: {} ({}{})", in.core_name,
                            level ? "the library's choice" : "a core this check does not rank; kept",
                            target.level >= 0 && level ? fmt::format(", at least the {} this CPU needs", target.name)
                                                       : std::string()));
  }
  if (same_name(choice, "keep")) {
    return warn(fmt::format("OpenBLAS kernels: {}, older than the {} this CPU allows ({}: {}); kept because "
                            "CLEAVE_BLAS_CORETYPE=keep",
                            in.core_name, target.name, cpu_line, target.why));
  }
  if (config.find("DYNAMIC_ARCH") == std::string_view::npos) {
    return warn(fmt::format("OpenBLAS kernels: {}, older than the {} this CPU allows ({}: {}), and this OpenBLAS ({}) "
                            "is built for one target, so OPENBLAS_CORETYPE cannot change it: install a DYNAMIC_ARCH "
                            "build or one built with TARGET={}",
                            in.core_name, target.name, cpu_line, target.why, in.blas_config, target.name));
  }
  BlasCoretypeDecision set;
  set.action = BlasCoretypeAction::kSetCoretype;
  set.coretype = target.name;
  set.message = fmt::format("OpenBLAS chose {} kernels for this CPU ({}: {}); using {}", in.core_name, cpu_line,
                            target.why, target.name);
  return set;
}

BlasCoretypeInputs blas_coretype_inputs_of_this_process() {
  const auto env = [](const char* name) -> std::optional<std::string> {
    const char* value = std::getenv(name);
    return value != nullptr && *value != 0 ? std::optional<std::string>(value) : std::nullopt;  // empty = unset
  };
  BlasCoretypeInputs in;
  in.cpu = read_cpu_features();
  in.blas_config = blas_config();
  in.core_name = blas_core_name();
  in.env_coretype = env("OPENBLAS_CORETYPE");
  in.env_switch = env(kCoretypeSwitch);
  in.env_marker = env(kCoretypeMarker);
  return in;
}

void reexec_with_blas_coretype(char** argv) {
  const BlasCoretypeDecision d = decide_blas_coretype(blas_coretype_inputs_of_this_process());
  if (d.action != BlasCoretypeAction::kSetCoretype) return;
  setenv(kCoretypeMarker, blas_core_name().c_str(), 1);
  setenv("OPENBLAS_CORETYPE", d.coretype.c_str(), 1);
  execv("/proc/self/exe", argv);
}

}  // namespace cleave::kernels::cpu

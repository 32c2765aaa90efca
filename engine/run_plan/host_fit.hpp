// Host fit: whether the ranks a launcher put on one host can hold what their memory plans say, against the memory the
// host allows them (its physical memory, or its cgroup's limit when smaller: a container's), before anything is built.
// A run past it fails once its world is up, or is killed by the OOM killer mid-step, whether or not device.memory_limit
// is set (the cap is per rank; the host holds all of its ranks).
//
// What a rank holds in host memory: on device.type cpu its memory plan's total (MemoryPlan::total, every category is
// host memory); on cuda its page-locked host memory (MemoryPlan::host_pinned; device memory is the GPU's and the
// allocator's cap is its check).
// The rule: refused when the ranks on the host need more than kHostMemoryShare of that memory; the rest is left
// for the system, the MPI runtime and what the plan does not count (the binary, libraries' pools, the data read).
// Which world ranks share a host is the launcher's choice and this process sees only how many (the launcher's local
// size): the need is the least those many ranks of the world can hold (the smallest per-rank plans), so a placement
// that could fit is never refused; with one pp rank (every rank's plan alike) it is exact.
// Invariant: host_fit_violation over a HostNeed is pure (tests inject the memory sizes); only the caller reads the
// machine (engine/core/physical_memory.hpp).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/config/config.hpp"
#include "engine/run_plan/memory_plan.hpp"
#include "engine/run_plan/plan.hpp"

namespace cleave::run_plan {

// The share of the memory a host allows (physical or the cgroup limit) the ranks on it may plan to use.
inline constexpr double kHostMemoryShare = 0.9;

// One host as the check sees it.
struct HostMemory {
  std::int64_t limit_bytes = 0;  // what this host allows its ranks (physical or cgroup); 0: unknown, nothing is checked
  std::string source;            // where the figure came from ("its physical memory, MemTotal in /proc/meminfo")
  int ranks_on_host = 1;            // the world's ranks on this host (the launcher's local size; 1 alone)
};

// What each rank of a plan holds in host memory.
struct HostNeed {
  std::vector<std::int64_t> rank_bytes;  // per pp rank: what one rank of it holds
  int ranks_per_pp_rank = 1;             // world ranks holding each pp rank's figure (tp x cp x dp)
  std::string what;                      // "the memory plan", "the memory plan's page-locked host memory"
  std::string largest;                   // the largest pp rank's breakdown (MemoryPlan::breakdown)
};

// The bytes the ranks on this host may plan: floor(limit x kHostMemoryShare).
std::int64_t usable_host_bytes(std::int64_t limit_bytes);

// The least `ranks_on_host` ranks of the world hold together: the smallest per-rank figures, each pp rank's figure
// counted for ranks_per_pp_rank ranks (ranks_on_host past the world: the whole world). Pure.
std::int64_t least_host_bytes(const HostNeed& need, int ranks_on_host);

// The refusal (naming the numbers, the rule, the source of the figure and the fix), or an empty string when the need
// fits or the host's memory is unknown. Pure.
std::string host_fit_violation(const HostNeed& need, const HostMemory& host);

// What every rank of `plan` holds in host memory (see above): per pp rank, estimate_rank_memory's total on the cpu,
// its host_pinned on cuda.
HostNeed host_need(const Plan& plan, const config::RunConfig& config, const CpuKernels& cpu);

}  // namespace cleave::run_plan

// Launcher environment parsing: world place (checked against MPI), local rank, device (launch_env.hpp).
#include "engine/comm/launch_env.hpp"

#include <algorithm>
#include <charconv>
#include <string>
#include <cstdlib>
#include <map>
#include <vector>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/core/error.hpp"

namespace cleave::comm {
namespace {

struct Source {
  const char* rank_var;
  const char* size_var;
};
constexpr Source kSources[] = {
    {"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"SLURM_LOCALID", "SLURM_STEP_TASKS_PER_NODE"},
};

std::optional<int> parse_count(const EnvLookup& env, const char* name) {
  std::optional<std::string> text = env(name);
  if (!text) return std::nullopt;
  int value = -1;
  const char* end = text->data() + text->size();
  auto [ptr, ec] = std::from_chars(text->data(), end, value);
  CLEAVE_CHECK(ec == std::errc() && ptr == end && value >= 0,
               "environment variable {}='{}' is not a non-negative integer", name, *text);
  return value;
}

// A plain non-negative integer; nullopt for anything else.
std::optional<int> plain_count(std::string_view text) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || value < 0) return std::nullopt;
  return value;
}

// SLURM_STEP_TASKS_PER_NODE ("4", "4(x2)", "2(x3),1": the step's tasks on each of its nodes, in node order) expanded
// into one count per node; empty when it does not parse.
std::vector<int> expand_tasks_per_node(std::string_view text) {
  std::vector<int> counts;
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    std::optional<int> repeat = 1;
    if (const std::size_t open = item.find("(x"); open != std::string_view::npos && item.back() == ')') {
      repeat = plain_count(item.substr(open + 2, item.size() - open - 3));
      item = item.substr(0, open);
    }
    const std::optional<int> count = plain_count(item);
    if (!count || *count == 0 || !repeat || *repeat == 0 || counts.size() + static_cast<std::size_t>(*repeat) > 65536) {
      return {};
    }
    counts.insert(counts.end(), static_cast<std::size_t>(*repeat), *count);
  }
  return counts;
}

// The tasks of this srun step on this node, from SLURM_STEP_TASKS_PER_NODE (every srun task has it;
// SLURM_NTASKS_PER_NODE is set only by --ntasks-per-node and is a bound, not a count): the one count when every node
// has it, else this node's by SLURM_NODEID (the node's place in the step); 0 when that cannot be told.
int slurm_tasks_on_node(const EnvLookup& env) {
  const std::vector<int> counts = expand_tasks_per_node(env("SLURM_STEP_TASKS_PER_NODE").value_or(""));
  if (counts.empty()) return 0;
  if (std::all_of(counts.begin(), counts.end(), [&](int c) { return c == counts.front(); })) return counts.front();
  const std::optional<int> node = plain_count(env("SLURM_NODEID").value_or(""));
  return node && static_cast<std::size_t>(*node) < counts.size() ? counts[static_cast<std::size_t>(*node)] : 0;
}

}  // namespace

EnvLookup process_env() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

std::optional<LocalRank> local_rank_from_env(const EnvLookup& env) {
  for (const Source& source : kSources) {
    const bool slurm = std::string_view(source.rank_var) == "SLURM_LOCALID";
    // A batch script's own environment holds SLURM_LOCALID=0 (and SLURM_NTASKS_PER_NODE of the allocation): only a
    // task srun started (SLURM_STEP_NUM_TASKS set) is placed by SLURM.
    if (slurm && !env("SLURM_STEP_NUM_TASKS")) continue;
    std::optional<int> rank = parse_count(env, source.rank_var);
    if (!rank) continue;
    LocalRank out;
    out.local_rank = *rank;
    out.source = source.rank_var;
    out.local_size = slurm ? slurm_tasks_on_node(env) : plain_count(env(source.size_var).value_or("")).value_or(0);
    return out;
  }
  return std::nullopt;
}

std::optional<WorldPlace> world_place_from_env(const EnvLookup& env) {
  // SLURM_PROCID / SLURM_NTASKS also exist in a batch script's own environment (rank 0 of the allocation's task
  // count), where a plain `cleave train` is a legitimate world of one. Only a task srun launched carries
  // SLURM_STEP_NUM_TASKS, so that is the size read and the sign that SLURM launched this process.
  constexpr Source kWorldSources[] = {
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
      {"PMI_RANK", "PMI_SIZE"},
      {"SLURM_PROCID", "SLURM_STEP_NUM_TASKS"},
      {"PMIX_RANK", nullptr},
  };
  for (const Source& source : kWorldSources) {
    if (std::string_view(source.rank_var) == "SLURM_PROCID" && !env("SLURM_STEP_NUM_TASKS")) continue;
    const std::optional<int> rank = parse_count(env, source.rank_var);
    if (!rank) continue;
    WorldPlace place;
    place.rank = *rank;
    place.rank_var = source.rank_var;
    if (source.size_var != nullptr) {
      if (const std::optional<int> size = parse_count(env, source.size_var)) {
        CLEAVE_CHECK(*size >= 1 && *rank < *size,
                     "launcher environment: {}={} is not a rank of a world of {}={} (expected 0 <= rank < size)",
                     source.rank_var, *rank, source.size_var, *size);
        place.size = *size;
        place.size_var = source.size_var;
      }
    }
    return place;
  }
  return std::nullopt;
}

void check_world_place(const std::optional<WorldPlace>& place, int mpi_rank, int mpi_size) {
  if (!place) return;
  const bool rank_ok = place->rank == mpi_rank;
  const bool size_ok = place->size == 0 || place->size == mpi_size;
  if (rank_ok && size_ok) return;
  const std::string claim = place->size == 0 ? fmt::format("{}={}", place->rank_var, place->rank)
                                             : fmt::format("{}={}, {}={}", place->rank_var, place->rank,
                                                           place->size_var, place->size);
  CLEAVE_THROW(
      "launcher and MPI disagree about this process: the launcher says rank {}{} ({}), MPI_COMM_WORLD says rank {} "
      "of {}. {}",
      place->rank, place->size == 0 ? std::string() : fmt::format(" of {}", place->size), claim, mpi_rank, mpi_size,
      mpi_size == 1 && (place->size > 1 || place->rank > 0)
          ? "Each process started its own one-rank MPI world: under SLURM launch with `srun --mpi=pmix` (check "
            "`srun --mpi=list`), or use mpirun"
          : "The processes were not started as one MPI job by this launcher (a stale variable from an outer "
            "launcher?); launch with mpirun, or srun --mpi=pmix");
}

LocalRank resolve_local_rank(std::span<const std::string> hostnames, std::span<const int> claimed, int rank,
                             std::string_view claim_source) {
  CLEAVE_ASSERT(hostnames.size() == claimed.size() && rank >= 0 && static_cast<std::size_t>(rank) < hostnames.size(),
                "resolve_local_rank: {} host names, {} claims, rank {}", hostnames.size(), claimed.size(), rank);
  const std::string& host = hostnames[static_cast<std::size_t>(rank)];
  int position = 0;
  int on_host = 0;
  for (std::size_t q = 0; q < hostnames.size(); ++q) {
    if (hostnames[q] != host) continue;
    if (static_cast<int>(q) < rank) ++position;
    ++on_host;
  }
  bool claims_usable = true;
  std::set<std::pair<std::string, int>> seen;
  for (std::size_t q = 0; q < hostnames.size() && claims_usable; ++q) {
    claims_usable = claimed[q] >= 0 && seen.emplace(hostnames[q], claimed[q]).second;
  }
  if (claims_usable) return {claimed[static_cast<std::size_t>(rank)], on_host, std::string(claim_source)};
  return {position, on_host, "hostname"};
}

int gpu_of_local_rank(int local_rank, int visible_gpus) {
  CLEAVE_ASSERT(visible_gpus >= 1 && local_rank >= 0, "gpu_of_local_rank: local rank {} with {} GPUs", local_rank,
                visible_gpus);
  return local_rank % visible_gpus;
}

int select_device(const LocalRank& local, int device_count, std::string_view hostname,
                  std::string_view visible_devices) {
  CLEAVE_CHECK(device_count >= 1, "host {}: no CUDA device is visible (CUDA_VISIBLE_DEVICES='{}')", hostname,
               visible_devices);
  return gpu_of_local_rank(local.local_rank, device_count);
}

GpuOwnership gpu_ownership(std::span<const GpuRecord> records) {
  for (std::size_t q = 0; q < records.size(); ++q) {
    if (records[q].gpu.empty()) return {false, fmt::format("rank {} has no GPU of its own ({})", q, records[q].error)};
  }
  std::map<std::pair<std::string, std::string>, std::vector<std::size_t>> holders;  // (host, bus id) -> ranks
  for (std::size_t q = 0; q < records.size(); ++q) holders[{records[q].host, records[q].gpu}].push_back(q);
  // The shared GPU named is the one of the lowest rank that shares, so every rank words the same verdict.
  const std::vector<std::size_t>* first = nullptr;
  std::pair<std::string, std::string> where;
  for (const auto& [gpu, ranks] : holders) {
    if (ranks.size() > 1 && (first == nullptr || ranks.front() < first->front())) {
      first = &ranks;
      where = gpu;
    }
  }
  if (first == nullptr) return {true, {}};
  const std::vector<std::size_t> head(first->begin(), first->end() - 1);
  return {false, fmt::format("ranks {} and {} share GPU {} on host {}", fmt::join(head, ", "), first->back(),
                             where.second, where.first)};
}

}  // namespace cleave::comm

// Schedule registry: name → generator, with the checks that make impossible combinations clear errors.
// Registration is an explicit table (no static self-registration, which static libraries drop). Each entry
// carries its own generator, so a name is either in the table with the function that builds it or unknown:
// there is no if-chain to forget a case in, and no default branch for a name to fall through to. The config
// layer asks this table for the names it accepts (engine/config), so there is one list.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "engine/core/error.hpp"
#include "pipeline/schedules/schedules.hpp"

namespace cleave::pipeline {
namespace {

// Every generator behind one signature; those with one stage (or a fixed two) per rank ignore `v`, which
// make_schedule has already checked against the entry's range.
using Generator = Schedule (*)(int pp_size, int num_microbatches, int virtual_stages);

struct Entry {
  std::string_view name;
  Generator generate;
  int min_virtual;  // allowed virtual stages per rank: [min_virtual, max_virtual], max 0 = unbounded
  int max_virtual;
  std::string_view virtual_hint;
  int min_microbatches_per_rank = 0;  // the schedule needs m >= this × pp_size (0: any m >= 1)
};

constexpr Entry kSchedules[] = {
    {"gpipe", [](int p, int m, int) { return gpipe_schedule(p, m); }, 1, 1,
     "one stage per rank; use interleaved_1f1b for virtual stages"},
    {"1f1b", [](int p, int m, int) { return one_f_one_b_schedule(p, m); }, 1, 1,
     "one stage per rank; use interleaved_1f1b for virtual stages"},
    {"interleaved_1f1b", [](int p, int m, int v) { return interleaved_1f1b_schedule(p, m, v); }, 2, 0,
     "at least 2 virtual stages per rank; use 1f1b for one"},
    {"zb_h1", [](int p, int m, int) { return zb_h1_schedule(p, m); }, 1, 1,
     "one stage per rank; use zb_v for two chunks per rank"},
    {"zb_h2", [](int p, int m, int) { return zb_h2_schedule(p, m); }, 1, 1,
     "one stage per rank; use zb_v or dualpipev for two chunks per rank"},
    {"zb_v", [](int p, int m, int) { return zb_v_schedule(p, m); }, 2, 2,
     "exactly 2 chunks per rank (V-shaped placement)"},
    {"dualpipev", [](int p, int m, int) { return dualpipev_schedule(p, m); }, 2, 2,
     "exactly 2 chunks per rank (V-shaped placement)", 2},
    {"auto", [](int p, int m, int) { return auto_schedule_uniform(p, m); }, 1, 1,
     "one stage per rank (the automatic scheduler places one stage on each rank)"},
};

const Entry* find(std::string_view name) {
  for (const auto& entry : kSchedules) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

}  // namespace

namespace detail {
void check_generator_args(std::string_view name, int pp_size, int num_microbatches) {
  CLEAVE_CHECK(pp_size >= 1, "schedule {}: pp_size must be at least 1, got {}", name, pp_size);
  CLEAVE_CHECK(num_microbatches >= 1, "schedule {}: the number of micro-batches must be at least 1, got {}", name,
               num_microbatches);
}
}  // namespace detail

std::vector<std::string_view> schedule_names() {
  std::vector<std::string_view> names;
  for (const auto& entry : kSchedules) names.push_back(entry.name);
  return names;
}

bool is_schedule_name(std::string_view name) { return find(name) != nullptr; }

int default_virtual_stages(std::string_view name) {
  const Entry* entry = find(name);
  return entry != nullptr ? entry->min_virtual : 1;
}

int schedule_min_microbatches(std::string_view name, int pp_size) {
  const Entry* entry = find(name);
  CLEAVE_CHECK(entry != nullptr, "unknown schedule '{}' (known: {})", name, fmt::join(schedule_names(), ", "));
  return std::max(1, entry->min_microbatches_per_rank * pp_size);
}

void check_schedule_args(std::string_view name, int pp_size, int num_microbatches, int virtual_stages) {
  const Entry* entry = find(name);
  CLEAVE_CHECK(entry != nullptr, "unknown schedule '{}' (known: {}; or the path of a schedule file)", name,
               fmt::join(schedule_names(), ", "));
  detail::check_generator_args(name, pp_size, num_microbatches);
  const int min_m = std::max(1, entry->min_microbatches_per_rank * pp_size);
  CLEAVE_CHECK(num_microbatches >= min_m,
               "schedule {} needs at least {} × pp_size = {} micro-batches per step, got {} (pp_size {}); raise the "
               "micro-batches per step (batch.gradient_accumulation_steps) or choose another schedule",
               name,
               entry->min_microbatches_per_rank, min_m, num_microbatches, pp_size);
  check_virtual_stages(name, virtual_stages);
}

void check_virtual_stages(std::string_view name, int virtual_stages) {
  const Entry* entry = find(name);
  CLEAVE_CHECK(entry != nullptr, "unknown schedule '{}' (known: {}; or the path of a schedule file)", name,
               fmt::join(schedule_names(), ", "));
  const bool too_few = virtual_stages < entry->min_virtual;
  const bool too_many = entry->max_virtual > 0 && virtual_stages > entry->max_virtual;
  CLEAVE_CHECK(!too_few && !too_many, "schedule {} runs {}, got virtual_stages {}", name, entry->virtual_hint,
               virtual_stages);
}

Schedule make_schedule(std::string_view name, int pp_size, int num_microbatches, int virtual_stages) {
  check_schedule_args(name, pp_size, num_microbatches, virtual_stages);
  const Entry* entry = find(name);
  return entry->generate(pp_size, num_microbatches, virtual_stages);
}

}  // namespace cleave::pipeline

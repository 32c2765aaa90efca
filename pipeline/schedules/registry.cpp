// Schedule registry: name → generator, with the checks that make impossible combinations clear errors.
// Registration is an explicit table (no static self-registration, which static libraries drop).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/core/error.hpp"
#include "pipeline/schedules/schedules.hpp"

namespace cleave::pipeline {
namespace {

struct Entry {
  std::string_view name;
  int min_virtual;  // allowed virtual stages per rank: [min_virtual, max_virtual], max 0 = unbounded
  int max_virtual;
  std::string_view virtual_hint;
};

constexpr Entry kSchedules[] = {
    {"gpipe", 1, 1, "one stage per rank; use interleaved_1f1b for virtual stages"},
    {"1f1b", 1, 1, "one stage per rank; use interleaved_1f1b for virtual stages"},
    {"interleaved_1f1b", 2, 0, "at least 2 virtual stages per rank; use 1f1b for one"},
    {"zb_h1", 1, 1, "one stage per rank; use zb_v for two chunks per rank"},
    {"zb_v", 2, 2, "exactly 2 chunks per rank (V-shaped placement)"},
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

Schedule make_schedule(std::string_view name, int pp_size, int num_microbatches, int virtual_stages) {
  const Entry* entry = find(name);
  CLEAVE_CHECK(entry != nullptr, "unknown schedule '{}' (known: {}; or the path of a schedule file)", name,
               fmt::join(schedule_names(), ", "));
  detail::check_generator_args(name, pp_size, num_microbatches);
  const bool too_few = virtual_stages < entry->min_virtual;
  const bool too_many = entry->max_virtual > 0 && virtual_stages > entry->max_virtual;
  CLEAVE_CHECK(!too_few && !too_many, "schedule {} runs {}, got virtual_stages {}", name, entry->virtual_hint,
               virtual_stages);
  if (name == "gpipe") return gpipe_schedule(pp_size, num_microbatches);
  if (name == "1f1b") return one_f_one_b_schedule(pp_size, num_microbatches);
  if (name == "interleaved_1f1b") return interleaved_1f1b_schedule(pp_size, num_microbatches, virtual_stages);
  if (name == "zb_h1") return zb_h1_schedule(pp_size, num_microbatches);
  return zb_v_schedule(pp_size, num_microbatches);
}

}  // namespace cleave::pipeline

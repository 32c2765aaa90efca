// The layout of each attempt (layout_choice.hpp): the config's own, checked on the slots, and after a failure
// --keep-layout's or the planner's best for the ranks left.
#include "engine/supervise/layout_choice.hpp"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <numeric>

#include <fmt/format.h>

#include "engine/core/allocator.hpp"
#include "engine/core/english.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/core/log.hpp"
#include "engine/planner/hardware_profile.hpp"
#include "engine/run_plan/plan.hpp"
#include "engine/supervise/recovery_policy.hpp"
#include "engine/supervise/restart_record.hpp"
#include "engine/train/rank_setup.hpp"

namespace cleave::supervise {

namespace fs = std::filesystem;

std::string describe(const planner::PlanChoice& c) {
  // The schedule as run.json names it (run_plan::Plan::schedule_label): a multi-chunk schedule at pp 1 runs its chunks
  // on one rank.
  const std::string schedule = c.pp > 1               ? c.schedule
                               : c.virtual_stages > 1 ? fmt::format("{} on one rank, running its {} chunks", c.schedule,
                                                                    c.virtual_stages)
                                                      : std::string("single stage");
  return fmt::format("{}, micro {} x accum {}, {}{}", c.layout(), c.micro_batch,
                     c.global_batch / (c.micro_batch * c.dp), schedule,
                     c.zero_stage > 0 ? fmt::format(", ZeRO-{}", c.zero_stage) : std::string());
}

planner::PlanChoice config_layout(const SuperviseOptions& o, const config::RunConfig& base) {
  planner::PlanChoice choice;
  try {
    const auto& p = base.parallel;
    const int world = p.data_parallel_size > 0
                          ? p.tensor_model_parallel_size * p.context_parallel_size * p.pipeline_model_parallel_size *
                                p.data_parallel_size
                          : static_cast<int>(o.slots.size());
    choice = planner::choice_of_config(o.config_path, o.overrides, world);
    static_cast<void>(choice.apply_to(base));  // the config's own checks at this world, before anything starts
    // and its plan, as each attempt's `cleave train` makes it before its world (more stages than blocks, a memory cap
    // its split exceeds): refused here, the job was started and its first attempt stopped with it.
    static_cast<void>(train::plan_before_world(base, world, o.config_path.empty() ? "<defaults>" : o.config_path,
                                               o.overrides));
  } catch (const std::exception& e) {
    const std::string message = fmt::format("run: the config does not run on the {} given: {}; nothing was "
                                            "started (set parallel.* after the -- or give other --slots)",
                                            count_of(static_cast<std::int64_t>(o.slots.size()), "slot"), e.what());
    // The config's own checks at this world: bad input (exit 64), as each attempt's trainer would stop with it.
    if (dynamic_cast<const Error*>(&e) != nullptr) throw InputError(message);
    throw Error(message);
  }
  CLEAVE_CHECK_INPUT(choice.world() <= static_cast<int>(o.slots.size()),
                     "run: the config's layout {} needs {} but only {} {} given", choice.layout(),
                     count_of(choice.world(), "rank"), count_of(static_cast<std::int64_t>(o.slots.size()), "slot"),
                     o.slots.size() == 1 ? "is" : "are");
  return choice;
}

void check_profile_device(const std::string& path, DeviceType profile, const config::RunConfig& base) {
  const std::string_view job = enum_name(base.device.type);
  CLEAVE_CHECK_INPUT(profile == base.device.type,
                     "run: --profile {} describes a {} machine, but the job runs on the config's device.type \"{}\": "
                     "the re-plan after a failure would choose the layout for a machine the job does not run on; "
                     "nothing was started (give a profile of the {} machine the job runs on, e.g. cleave profile "
                     "CONFIG --out FILE, or drop --profile to measure this machine once; to run on {}, set "
                     "device.type={} after the --)",
                     path, enum_name(profile), job, job, enum_name(profile), enum_name(profile));
}

void check_replan_inputs(const SuperviseOptions& o, const config::RunConfig& base, int world) {
  if (o.keep_layout) {
    CLEAVE_CHECK_INPUT(o.profile.empty() && o.memory_limit.empty(),
                       "run: {} prices the planner's re-plan, but --keep-layout keeps tp x cp x pp and never re-plans; "
                       "nothing was started (drop {} or --keep-layout)",
                       o.profile.empty() ? "--memory-limit" : "--profile",
                       o.profile.empty() ? "--memory-limit" : "--profile");
    return;
  }
  std::optional<planner::PlanningSetup> setup;
  try {
    if (!o.profile.empty()) setup = planner::planning_setup(base, o.profile, o.memory_limit, world);
    else if (!o.memory_limit.empty()) static_cast<void>(parse_bytes(o.memory_limit, "--memory-limit"));
  } catch (const Error& e) {
    // The files and values the command line names: bad input (exit 64), found before any job.
    throw InputError(fmt::format(
        "run: {}; nothing was started (the re-plan after a failure reads --profile and --memory-limit)", e.what()));
  }
  if (setup) check_profile_device(o.profile, setup->profile.device_type, base);
}

LayoutPlanner::LayoutPlanner(const SuperviseOptions& options, const config::RunConfig& base, std::string dir)
    : options_(options), base_(base), dir_(std::move(dir)) {}

LayoutPlanner::Pick LayoutPlanner::best(int world) {
  const std::string profile = profile_path(world);
  const auto setup = planner::planning_setup(base_, profile, options_.memory_limit, world);
  planner::SearchResult result;
  try {
    result = planner::search_plans(options_.config_path, options_.overrides, setup.profile, setup.options);
  } catch (const Error& e) {  // a world no layout divides
    return {std::nullopt, e.what()};
  }
  const std::string cap = result.memory_limit > 0 ? format_bytes(result.memory_limit) : "(none)";
  if (result.ranked.empty()) {
    return {std::nullopt, fmt::format("no plan on {} fits the memory cap {}", count_of(world, "rank"), cap)};
  }
  const auto& best = result.ranked.front();
  return {best.choice, fmt::format("the planner's best of {} plans under the cap {} (predicted {:.1f} ms/step, peak {})",
                                   result.ranked.size(), cap, best.step_s * 1e3, format_bytes(best.peak_bytes))};
}

std::string LayoutPlanner::profile_path(int world) {
  if (!options_.profile.empty()) return options_.profile;
  const std::string path = (fs::path(dir_) / "profile.json").string();
  if (!fs::exists(path)) {
    log::info("run: measuring this machine for the planner (once; kept as {}; --profile FILE skips this)", path);
    // As `cleave plan` without --profile measures it: no memory cap of its own ("device_memory_GiB": "none"),
    // which the profile reader takes back as it was written.
    const auto profile = planner::measure_this_machine(run_plan::model_spec(base_.model), world);
    replace_file(path, planner::profile_to_json(profile).dump(2) + "\n");
  }
  return path;
}

namespace {

// --keep-layout's refusal: the kept tp x cp x pp (and ep) needs more ranks than are left.
std::string keep_layout_refusal(const planner::PlanChoice& c, int n) {
  const int kept = c.tp * c.cp * c.pp;
  return fmt::format("--keep-layout keeps tp x cp x pp = {} x {} x {} = {} ranks (and ep {}), but {} rank{} left (the "
                     "smallest world for this layout is {})",
                     c.tp, c.cp, c.pp, kept, c.ep, n, n == 1 ? " is" : "s are", kept * c.ep / std::gcd(c.cp, c.ep));
}

// The planner's refusal at `n` ranks: its reason, and the smallest world up to twice the slots given that fits.
std::string planner_refusal(const SuperviseOptions& o, LayoutPlanner& planner, const std::string& reason, int n) {
  const int original = static_cast<int>(o.slots.size());
  const auto smallest = smallest_world(n + 1, std::max(2 * original, n + 1), [&](int w) {
    return planner.best(w).choice.has_value();
  });
  return fmt::format("no layout fits at the {} rank{} left ({}); {}", n, n == 1 ? "" : "s", reason,
                     smallest ? fmt::format("the smallest world that fits is {} ranks", *smallest)
                              : fmt::format("no world up to {} ranks fits either", 2 * original));
}

}  // namespace

NextLayout next_layout(const SuperviseOptions& o, LayoutPlanner& planner, const planner::PlanChoice& current,
                       int ranks_left) {
  if (o.keep_layout) {
    std::optional<planner::PlanChoice> next = keep_layout(current, ranks_left);
    if (!next) return {std::nullopt, keep_layout_refusal(current, ranks_left)};
    return {next, "kept tp x cp x pp (--keep-layout), dp shrunk"};
  }
  LayoutPlanner::Pick pick = planner.best(ranks_left);
  if (!pick.choice) return {std::nullopt, planner_refusal(o, planner, pick.note, ranks_left)};
  return {pick.choice, pick.note};
}

}  // namespace cleave::supervise

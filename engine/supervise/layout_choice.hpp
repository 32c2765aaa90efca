// The layout of each attempt of `cleave run` (supervisor.hpp): the config's own on the slots given, checked before
// anything starts, and after a failure the layout for the ranks left: --keep-layout's (recovery_policy.hpp's
// keep_layout) or the planner's best plan under the memory cap.
//
// Invariants: every input the re-plan reads (--profile, --memory-limit) is checked before the first attempt starts,
// so a bad one is refused then and never hours in, at the first failure; the re-plan prices the device the job runs
// on (the config's device.type): a --profile of another device is refused then.
#pragma once

#include <optional>
#include <string>

#include "engine/config/config.hpp"
#include "engine/core/device.hpp"
#include "engine/planner/plan_search.hpp"
#include "engine/supervise/supervisor.hpp"

namespace cleave::supervise {

// A layout as the log and the records state it: "tp x cp x dp x pp, micro M x accum A, schedule[, ZeRO-z]".
std::string describe(const planner::PlanChoice& choice);

// The config's own layout on options.slots (a config that fixes dp uses tp x cp x dp x pp of them, the rest idle;
// dp -1 fills them), with the config's own checks at that world. Throws InputError (bad input: `cleave run` exits
// 64 before any job) naming the slots and the fix when it does not run there.
planner::PlanChoice config_layout(const SuperviseOptions& options, const config::RunConfig& base);

// The re-plan's inputs (--profile, --memory-limit) at `world` ranks; under --keep-layout, which never re-plans,
// either is refused, and so is a --profile of another device than the config's (check_profile_device). Throws
// InputError (bad input: exit 64) saying nothing was started.
void check_replan_inputs(const SuperviseOptions& options, const config::RunConfig& base, int world);

// The re-plan prices the machine the job runs on, the config's device.type: a profile of another device (an H100's
// for a CPU config) would rank layouts by that machine's speed and memory, and the job would run them on this one.
// (`cleave plan` may price another machine: it starts nothing.) Throws InputError naming both devices and the fix.
void check_profile_device(const std::string& profile_path, DeviceType profile, const config::RunConfig& base);

// The planner's best plan at a given world: the profile is --profile, else this machine measured once for the model
// and kept as `dir`/profile.json.
class LayoutPlanner {
 public:
  // Keeps references to `options` and `base`: both outlive the planner.
  LayoutPlanner(const SuperviseOptions& options, const config::RunConfig& base, std::string dir);

  // The best plan on `world` ranks (nullopt: none fits), with the reason line for the log.
  struct Pick {
    std::optional<planner::PlanChoice> choice;
    std::string note;
  };
  Pick best(int world);

 private:
  std::string profile_path(int world);

  const SuperviseOptions& options_;
  const config::RunConfig& base_;
  std::string dir_;
};

// The layout for the `ranks_left` ranks after a failure of an attempt on `current`: --keep-layout's (tp x cp x pp and
// ep kept, dp shrunk) or the planner's best. `note` is the record's layout_choice, or, without a layout, the reason
// the supervisor gives up (it names the smallest world that would fit).
struct NextLayout {
  std::optional<planner::PlanChoice> choice;
  std::string note;
};
NextLayout next_layout(const SuperviseOptions& options, LayoutPlanner& planner, const planner::PlanChoice& current,
                       int ranks_left);

}  // namespace cleave::supervise

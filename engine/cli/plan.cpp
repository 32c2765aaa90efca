// `cleave plan CONFIG --world N [--profile FILE] [--memory-limit SIZE] [--top K] [--write BEST.json]
// [--explain] [--trial K [--trial-steps N] [--launcher CMD]] [--set key=value ...]`: searches tp x pp x dp, schedule, virtual stages, micro-batch size
// ZeRO stage and activation recomputation for CONFIG on N ranks (engine/planner/plan_search.hpp), discards plans over the memory cap
// with the reason, ranks the rest by simulated step time and prints them; --write saves the best as a
// config `mpirun -np N cleave train BEST.json` runs unchanged (with --memory-limit as its device.memory_limit, and
// a train.out_dir of its own named after BEST, so the source's run directory is left alone). No MPI: it plans;
// with --trial K it launches `mpiexec -n N cleave train` on the top K plans for a few steps each, prints predicted
// against measured and re-ranks by measurement (engine/cli/plan_trial.hpp); --write then saves the fastest measured.
// Invariant: --write never overwrites a file; with no plan under the cap it exits non-zero naming the
// smallest need per memory category and the plan that came closest.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/cli/args.hpp"
#include "engine/cli/commands.hpp"
#include "engine/cli/plan_trial.hpp"
#include "engine/config/config.hpp"
#include "engine/core/allocator.hpp"
#include "engine/core/error.hpp"
#include "engine/core/one_line.hpp"
#include "engine/planner/hardware_profile.hpp"
#include "engine/planner/plan_search.hpp"

namespace cleave::cli {
namespace {

ArgParser plan_args() {
  ArgParser p("plan",
              "cleave plan CONFIG.json --world N [--profile FILE] [--memory-limit SIZE] [--top K]\n"
              "                   [--write BEST.json] [--explain] [--json FILE]\n"
              "                   [--trial K [--trial-steps N] [--launcher CMD]] [--set key.path=value ...]",
              R"(Searches every plan of CONFIG on N ranks: tensor-parallel size (dividing n_heads and d_ff, within a node),
pipeline size, data-parallel size, schedule and virtual stages, micro-batch size, ZeRO stage and
activation recomputation (train.recompute), keeping the global batch. Memory per rank comes from the trainer's memory plan; step time from the pipeline
simulator with costs from the cost model and a hardware profile. Plans over the cap are discarded.
Run it without mpiexec: --trial K starts `mpiexec -n N cleave train` itself for each of the top K plans.)");
  p.positional("CONFIG.json", "config file")
      .count("--world", "N", "ranks the plan is for (required)", std::nullopt)
      .text("--profile", "FILE", "hardware profile (profiles/*.json); default: measure this machine now")
      .size("--memory-limit", "SIZE",
            "cap per rank, e.g. 64MiB or 80GiB (default: device.memory_limit, else the\n"
            "profile's device memory, else none)")
      .count("--top", "K", "plans to print", 10)
      .text("--write", "FILE",
            "write the best plan as a config for `mpirun -np N cleave train FILE`, with a\n"
            "fresh train.out_dir beside the source's, named after FILE (runs/best for best.json)")
      .flag("--explain", "say, for each runner-up, where its extra time goes against the best plan")
      .text("--json", "FILE",
            "also write every plan that fits (ranked) with its overrides, predicted step time,\n"
            "throughput, bubble and peak memory per rank (refuses to overwrite FILE)")
      .count("--trial", "K",
             "train the top K plans for --trial-steps steps each under mpiexec, print predicted\n"
             "against measured and re-rank by measurement (--write then saves the fastest measured)",
             0, 0)
      .count("--trial-steps", "N", "steps per trial plan; the first 2 are not counted", 8, 3)
      .text("--launcher", "CMD",
            "MPI launcher for --trial, words split at spaces (default: mpiexec, with\n"
            "--oversubscribe when N exceeds this machine's cores); `-n N` is appended")
      .config_overrides();
  return p;
}

// train.out_dir for a plan written to `plan_file`: beside `source` (its parent directory), named after the plan
// file's stem ("runs/gpt_fortunes" + "best.json" -> "runs/best"), with _2, _3, ... when that path exists.
std::string plan_out_dir(const std::string& source, const std::string& plan_file) {
  const std::filesystem::path parent = std::filesystem::path(source).parent_path();
  const std::string stem = std::filesystem::path(plan_file).stem().string();
  std::filesystem::path dir = parent / stem;
  for (int n = 2; std::filesystem::exists(dir); ++n) dir = parent / fmt::format("{}_{}", stem, n);
  return dir.string();
}

std::string ms(double seconds) { return fmt::format("{:.2f}", seconds * 1e3); }

std::string signed_ms(double seconds) { return fmt::format("{:+.2f} ms", seconds * 1e3); }

}  // namespace

int run_plan(int argc, char** argv) {
  const ArgParser parser = plan_args();
  const Args args = parser.parse(argc, argv);
  if (args.help()) {
    std::fputs(parser.help_text().c_str(), stdout);
    return 0;
  }
  const std::string config_path = args.positional(0);
  const std::vector<std::string> overrides = args.all("--set");
  const std::string profile_path = args.text("--profile");
  const std::string write_path = args.text("--write");
  const std::string json_path = args.text("--json");
  // The planner reads the cap as text ("" = from the config or profile); the bytes parsed here pass unchanged.
  const auto limit = args.size("--memory-limit");
  const std::string limit_text = limit ? std::to_string(*limit) : std::string();
  const int world = args.given("--world") ? static_cast<int>(args.count("--world")) : 0;
  const int top = static_cast<int>(args.count("--top"));
  const bool explain = args.on("--explain");
  const int trials = static_cast<int>(args.count("--trial"));
  CLEAVE_CHECK(world >= 1, "plan: --world N is required (the number of ranks to plan for)");
  CLEAVE_CHECK(write_path.empty() || !std::filesystem::exists(write_path),
               "plan: --write {} exists; not overwriting it", write_path);
  CLEAVE_CHECK(json_path.empty() || !std::filesystem::exists(json_path), "plan: --json {} exists; not overwriting it",
               json_path);
  const config::RunConfig base = config::load_config(config_path, overrides);

  const auto [profile, options] = planner::planning_setup(base, profile_path, limit_text, world);
  const planner::SearchResult result = planner::search_plans(config_path, overrides, profile, options);

  std::printf("cleave plan: %s on %d ranks | profile: %s\n  (%s)\n  memory cap per rank: %s\n",
              config_path.empty() ? "<defaults>" : config_path.c_str(), world, profile.name.c_str(),
              profile.source.c_str(), result.memory_limit > 0 ? format_bytes(result.memory_limit).c_str() : "none");
  int invalid = 0, over = 0;
  for (const auto& r : result.rejected) (r.valid ? over : invalid) += 1;
  if (result.ranked.empty()) {
    // The smallest need per category over the valid plans, and the plan that came closest.
    const planner::PlanEstimate* closest = nullptr;
    std::array<std::int64_t, kNumMemoryCategories> least{};
    least.fill(-1);
    for (const auto& r : result.rejected) {
      if (!r.valid) continue;
      if (!closest || r.peak_bytes < closest->peak_bytes) closest = &r;
      for (int c = 0; c < kNumMemoryCategories; ++c) {
        if (least[c] < 0 || r.peak_by_category[c] < least[c]) least[c] = r.peak_by_category[c];
      }
    }
    CLEAVE_CHECK(closest != nullptr, "plan: none of the {} plans of {} ranks is valid for this config; first "
                 "reason: {}", result.rejected.size(), world, result.rejected.empty() ? "-" : result.rejected.front().reason);
    std::string needs;
    for (int c = 0; c < kNumMemoryCategories; ++c) {
      if (least[c] > 0) {
        needs += fmt::format("{}{} {}", needs.empty() ? "" : ", ", memory_category_name(static_cast<MemoryCategory>(c)),
                             format_bytes(least[c]));
      }
    }
    CLEAVE_THROW("plan: no plan fits the memory cap {} per rank ({} plans over it, {} invalid). The smallest need per "
                 "category over all plans: {}. Closest: {} {} micro {} zero {} recompute {} needs {} on pp rank {}; raise "
                 "{}, add ranks (--world) or shrink the model or batch",
                 format_bytes(result.memory_limit), over, invalid, needs, closest->choice.layout(),
                 closest->choice.schedule, closest->choice.micro_batch, closest->choice.zero_stage,
                 closest->choice.recompute, format_bytes(closest->peak_bytes), closest->peak_rank,
                 limit_text.empty() ? "device.memory_limit (the cap came from the config)" : "--memory-limit");
  }
  std::printf("\n%3s  %-13s %2s %-17s %5s %4s %2s %-9s %10s %12s %7s  %s\n", "#", "layout", "v", "schedule", "micro",
              "zero", "sp", "recompute", "step ms", (result.unit + "/s").c_str(), "bubble", "peak memory / rank");
  const int shown = std::min<int>(top, static_cast<int>(result.ranked.size()));
  for (int i = 0; i < shown; ++i) {
    const auto& e = result.ranked[static_cast<std::size_t>(i)];
    std::printf("%3d  %-13s %2d %-17s %5lld %4s %2s %-9s %10s %12.0f %7.3f  %s (pp rank %d)%s\n", i + 1,
                e.choice.layout().c_str(), e.choice.virtual_stages, e.choice.schedule.c_str(),
                static_cast<long long>(e.choice.micro_batch), e.choice.zero_label().c_str(), e.choice.sequence_parallel ? "y" : "-", std::string(enum_name(e.choice.recompute)).c_str(),
                ms(e.step_s).c_str(), e.items_per_s, e.bubble, format_bytes(e.peak_bytes).c_str(), e.peak_rank,
                result.memory_limit > 0
                    ? fmt::format(" = {:.0f}% of cap", 100.0 * static_cast<double>(e.peak_bytes) / static_cast<double>(result.memory_limit)).c_str()
                    : "");
  }
  // Layouts that put more ranks on a node than it has cores: priced by their share of the cores, and said so.
  std::vector<std::string> warned;
  for (int i = 0; i < shown; ++i) {
    const auto& e = result.ranked[static_cast<std::size_t>(i)];
    if (!e.oversubscribed() || std::find(warned.begin(), warned.end(), e.choice.layout()) != warned.end()) continue;
    warned.push_back(e.choice.layout());
    std::printf("warning: %s\n", planner::oversubscription_warning(e).c_str());
  }
  // The engine's most frequent refusal (more stages than blocks, a lever this build does not have, ...).
  std::map<std::string, int> refusals;
  for (const auto& r : result.rejected) {
    if (!r.valid) refusals[r.reason] += 1;
  }
  const auto most = std::max_element(refusals.begin(), refusals.end(),
                                     [](const auto& a, const auto& b) { return a.second < b.second; });
  std::printf("\n%d of %zu plans that fit shown; %d over the memory cap, %d the engine refuses%s.\n", shown,
              result.ranked.size(), over, invalid,
              most == refusals.end() ? ""
                                     : fmt::format(" ({} of them: {})", most->second, shorten_at_word(most->first, 200)).c_str());
  if (explain && shown > 1) {
    const auto& best = result.ranked.front().breakdown;
    std::printf("\nwhere the runner-ups lose time against #1 (busiest rank; compute / tp all-reduce / idle incl. "
                "bubble and P2P / dp reduction / optimizer):\n");
    for (int i = 1; i < shown; ++i) {
      const auto& e = result.ranked[static_cast<std::size_t>(i)];
      const auto& b = e.breakdown;
      std::printf("%3d  %s: compute %s, tp %s, idle %s, dp %s, optimizer %s\n", i + 1,
                  signed_ms(e.step_s - result.ranked.front().step_s).c_str(), signed_ms(b.compute_s - best.compute_s).c_str(),
                  signed_ms(b.tp_comm_s - best.tp_comm_s).c_str(), signed_ms(b.idle_s - best.idle_s).c_str(),
                  signed_ms(b.dp_comm_s - best.dp_comm_s).c_str(), signed_ms(b.optimizer_s - best.optimizer_s).c_str());
    }
  }
  // --trial: the top plans trained for real, re-ranked by what they measured.
  std::vector<TrialResult> trial;
  if (trials > 0) {
    TrialOptions to;
    to.world = world;
    to.plans = trials;
    to.steps = static_cast<int>(args.count("--trial-steps"));
    to.launcher = args.text("--launcher");
    to.memory_limit = limit_text.empty() ? 0 : result.memory_limit;
    const auto launcher = trial_launcher(to.launcher, world);
    std::string launch;
    for (const auto& w : launcher) launch += (launch.empty() ? "" : " ") + w;
    std::printf("\ntrial: the top %d plans trained for %d steps each (%s cleave train ...; median step after the "
                "first %d):\n", std::min<int>(trials, static_cast<int>(result.ranked.size())), to.steps, launch.c_str(),
                kTrialWarmupSteps);
    std::fflush(stdout);
    trial = run_trials(config_path, overrides, result.ranked, to);
    std::printf("%9s %3s  %-13s %2s %-17s %5s %4s %2s %-9s %10s %10s %9s\n", "measured", "#", "layout", "v", "schedule",
                "micro", "zero", "sp", "recompute", "pred ms", "meas ms", "pred/meas");
    int place = 0;
    for (const auto& t : trial) {
      const auto& c = t.plan.choice;
      const std::string measured = t.measured ? fmt::format("{:>9}", ++place) : fmt::format("{:>9}", "failed");
      std::printf("%s %3d  %-13s %2d %-17s %5lld %4s %2s %-9s %10s %10s %9s%s\n", measured.c_str(), t.predicted_rank,
                  c.layout().c_str(), c.virtual_stages, c.schedule.c_str(), static_cast<long long>(c.micro_batch),
                  c.zero_label().c_str(), c.sequence_parallel ? "y" : "-", std::string(enum_name(c.recompute)).c_str(), ms(t.plan.step_s).c_str(),
                  t.measured ? ms(t.measured_s).c_str() : "-",
                  t.measured ? fmt::format("{:.2f}", t.plan.step_s / t.measured_s).c_str() : "-",
                  t.measured ? "" : ("  " + t.error).c_str());
    }
    CLEAVE_CHECK(!trial.empty() && trial.front().measured,
                 "plan --trial: none of the {} plans trained ({}); run one by hand with --write and `mpiexec -n {} "
                 "cleave train`", trial.size(), trial.empty() ? "-" : trial.front().error, world);
    if (trial.front().predicted_rank != 1) {
      std::string first = "failed";
      for (const auto& t : trial) {
        if (t.predicted_rank == 1 && t.measured) first = ms(t.measured_s) + " ms";
      }
      std::printf("re-ranked by measurement: plan #%d measured fastest (%s ms against #1's %s)\n",
                  trial.front().predicted_rank, ms(trial.front().measured_s).c_str(), first.c_str());
    } else {
      std::printf("the planner's #1 measured fastest\n");
    }
  }
  if (!json_path.empty()) {
    nlohmann::json plans = nlohmann::json::array();
    for (const auto& e : result.ranked) {
      plans.push_back({{"layout", e.choice.layout()},
                       {"schedule", e.choice.schedule},
                       {"virtual_stages", e.choice.virtual_stages},
                       {"micro_batch", e.choice.micro_batch},
                       {"zero_stage", e.choice.zero_stage},
                       {"zero_reduce", std::string(enum_name(e.choice.zero_reduce))},
                       {"sequence_parallel", e.choice.sequence_parallel},
                       {"comm_bytes", e.comm_bytes},
                       {"recompute", std::string(enum_name(e.choice.recompute))},
                       {"overrides", e.choice.overrides()},
                       {"step_s", e.step_s},
                       {"items_per_s", e.items_per_s},
                       {"bubble", e.bubble},
                       {"peak_bytes", e.peak_bytes},
                       {"peak_rank", e.peak_rank}});
    }
    for (const auto& t : trial) {  // measured by --trial: beside the prediction, in the ranking's order
      auto& entry = plans[static_cast<std::size_t>(t.predicted_rank - 1)];
      entry["measured_step_s"] = t.measured ? nlohmann::json(t.measured_s) : nlohmann::json(nullptr);
    }
    std::ofstream out(json_path);
    out << nlohmann::json{{"world", world}, {"profile", profile.name}, {"memory_limit", result.memory_limit},
                          {"plans", plans}}.dump(1)
        << "\n";
    CLEAVE_CHECK(out.good(), "plan: could not write {}", json_path);
  }
  if (!write_path.empty()) {
    const auto& best = trial.empty() ? result.ranked.front() : trial.front().plan;
    std::vector<std::string> all = overrides;
    for (const auto& o : best.choice.overrides()) all.push_back(o);
    config::RunConfig chosen = config::load_config(config_path, all);
    if (chosen.device.type == DeviceType::kCpu && profile.device_type == "cuda") chosen.device.type = DeviceType::kCuda;
    // The cap asked for on the command line travels with the plan: training then refuses a plan over it and
    // the allocator enforces it (a cap from the config is there already).
    if (!limit_text.empty()) chosen.device.memory_limit = result.memory_limit;
    // The plan is a new run: its own train.out_dir beside the source's, named after the plan file (the source's
    // directory may already hold the run the plan was made from, and train refuses to write over a run).
    const std::string source_out_dir = chosen.train.out_dir;
    chosen.train.out_dir = plan_out_dir(source_out_dir, write_path);
    std::ofstream out(write_path);
    out << config::to_json(chosen) << "\n";
    CLEAVE_CHECK(out.good(), "plan: could not write {}", write_path);
    std::printf("\nwrote plan #%d to %s (train.out_dir %s, a fresh directory; the source config's was %s): "
                "mpirun -np %d cleave train %s\n",
                trial.empty() ? 1 : trial.front().predicted_rank, write_path.c_str(), chosen.train.out_dir.c_str(), source_out_dir.c_str(), world, write_path.c_str());
  }
  return 0;
}

}  // namespace cleave::cli

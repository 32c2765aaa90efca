// `cleave plan CONFIG --world N [--profile FILE] [--memory-limit SIZE] [--top K] [--write BEST.json] [--explain]
// [--tie-within F] [--trial K [--trial-steps N] [--trial-rounds R] [--trial-spread F] [--trial-budget S]
// [--launcher CMD]] [--set key=value ...]`: searches tp x pp x dp, schedule, virtual stages, micro-batch size, ZeRO
// stage and activation recomputation for CONFIG on N ranks (engine/planner/plan_search.hpp), discards plans over
// the memory cap with the reason, orders the rest by predicted step time with near-ties (within the model's stated
// error, --tie-within) going to the plan with more memory headroom (engine/planner/plan_ranking.hpp) and prints
// them; --write saves the first as a config `mpirun -np N cleave train BEST.json` runs unchanged (with
// --memory-limit as its device.memory_limit, and a train.out_dir of its own named after BEST, so the source's run
// directory is left alone). No MPI: it plans; with --trial K it launches `mpiexec -n N cleave train` on the top K
// plans in interleaved rounds, prints predicted against measured (median and spread) and re-ranks only where the
// measurement is clearer than its spread (engine/cli/plan_trial.hpp); --write then saves the measured first.
// --explain with --trial: each trained plan's traced step set against its prediction row by row
// (engine/planner/measured_step.hpp), in the output and in --json.
// Invariant: --write never overwrites a file; with no plan under the cap it exits non-zero naming the
// smallest need per memory category and the plan that came closest.
#include <algorithm>
#include <cmath>
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
#include "engine/cli/ep_memory_args.hpp"
#include "engine/cli/plan_trial.hpp"
#include "engine/config/config.hpp"
#include "engine/core/allocator.hpp"
#include "engine/core/english.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/core/progress.hpp"
#include "engine/core/one_line.hpp"
#include "engine/core/executable.hpp"
#include "engine/core/output_path.hpp"
#include "engine/planner/hardware_profile.hpp"
#include "engine/planner/measured_step.hpp"
#include "engine/planner/plan_ranking.hpp"
#include "engine/planner/plan_search.hpp"
#include "engine/run_plan/plan.hpp"
#include "partition/ep_rules.hpp"

namespace cleave::cli {
namespace {

ArgParser plan_args() {
  ArgParser p("plan",
              "cleave plan CONFIG.json --world N [--profile FILE] [--memory-limit SIZE] [--top K]\n"
              "                   [--write BEST.json] [--explain] [--json FILE] [--tie-within F] [--ep-imbalance F]\n"
              "                   [--ep-stash-imbalance S] [--ep-peak-imbalance P]\n"
              "                   [--trial K [--trial-steps N] [--trial-rounds R] [--trial-spread F]\n"
              "                   [--trial-budget SECONDS] [--launcher CMD]] [--set key.path=value ...]",
              R"(Searches every plan of CONFIG on N ranks: tensor-parallel size (dividing n_heads and d_ff, within a node),
pipeline size, data-parallel size, schedule and virtual stages, micro-batch size, ZeRO stage and
activation recomputation (train.recompute), keeping the global batch. Memory per rank comes from the trainer's memory plan; step time from the pipeline
simulator with costs from the cost model and a hardware profile. Plans over the cap are discarded. Plans
predicted within --tie-within of each other are tied, and a tie goes to the plan with more memory headroom.
Run it without mpiexec: --trial K starts `mpiexec -n N cleave train` itself for each of the top K plans.)");
  p.positional("CONFIG.json", "config file")
      .count("--world", "N", "ranks the plan is for (required)", std::nullopt)
      .text("--profile", "FILE", "hardware profile (profiles/*.json); default: measure this machine now")
      .size("--memory-limit", "SIZE",
            "cap per rank, e.g. 64MiB or 80GiB; 0: no cap (default: device.memory_limit,\n"
            "else the profile's device memory, else none)")
      .count("--top", "K", "plans to print", 10)
      .text("--write", "FILE",
            "write the best plan as a config for `mpirun -np N cleave train FILE`, with a\n"
            "fresh train.out_dir beside the source's, named after FILE (runs/best for best.json)")
      .flag("--explain", "print plan #1's predicted step term by term (compute per block and pass, tp, cp,\n"
                         "ep, ZeRO, dp, optimizer, P2P, bubble) and each runner-up's difference per term;\n"
                         "with --trial, also each trained plan's measured step (train.trace's timeline) row\n"
                         "by row against the prediction, naming the row that disagrees most")
      .text("--json", "FILE",
            "also write every plan that fits (ranked) with its overrides, predicted step time,\n"
            "throughput, bubble and peak memory per rank, and on a GPU the page-locked host\n"
            "memory per rank (host_pinned_bytes; refuses to overwrite FILE)")
      .number("--tie-within", "F",
              "the model's stated error: plans predicted within this fraction of their group's\n"
              "fastest are tied, and the one with the lowest peak / cap comes first", planner::kPredictionError, 0)
      .number("--ep-imbalance", "F",
              "expert parallelism (moe): the busiest ep rank's routed rows over the mean, pricing the\n"
              "all-to-alls and its expert GEMMs, the time only (default 0: the --profile's figure measured\n"
              "by cleave profile at the plan's ep, else the expected figure for uniformly random top-k\n"
              "routing of the plan's tokens; docs/planner.md#expert-parallelism)", 0, 0)
      .count("--trial", "K",
             "train the top K plans under mpiexec in interleaved rounds (A B C A B C ...), print\n"
             "predicted against measured (median and spread of the rounds) and re-rank only where\n"
             "the ranges do not overlap (--write then saves the measured first)",
             0, 0)
      .count("--trial-steps", "N", "steps per trial run; the first 2 are not counted", 8, 3)
      .count("--trial-rounds", "R", "the most rounds (at least 3 are run before the spread may stop them)", 5, 1)
      .number("--trial-spread", "F",
              "stop once every plan's spread (relative half-range of its round medians,\n"
              "(max - min) / 2 / median) is at most F", 0.05, 0)
      .number("--trial-budget", "SECONDS",
              "start no round that would end after this many seconds (the first round always runs)", 600, 0)
      .text("--launcher", "CMD",
            "MPI launcher for --trial, words split at spaces (default: mpiexec, with\n"
            "--oversubscribe when N exceeds this machine's cores); `-n N` is appended. No\n"
            "quoting: a word holding a space cannot be given (wrap the launcher in a script)")
      .config_overrides();
  add_ep_memory_args(p);
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

// --explain: plan #1's predicted step term by term (they sum to its step), then per runner-up the terms where it
// differs from #1.
void print_explain(const std::vector<const planner::PlanEstimate*>& ordered, int shown) {
  if (shown < 1) return;
  const auto& first = *ordered.front();
  std::printf("\nplan #1's predicted step, term by term (busiest pp rank %d; the terms sum to the step):\n",
              first.breakdown.rank);
  for (const auto& line : planner::breakdown_table(first.breakdown)) std::printf("%s\n", line.c_str());
  if (shown < 2) return;
  std::printf("\nwhere the runner-ups lose time against #1 (busiest rank, term by term; terms within 0.005 ms of "
              "#1's left out):\n");
  for (int i = 1; i < shown; ++i) {
    const auto& e = *ordered[static_cast<std::size_t>(i)];
    std::string terms;
    for (int t = 0; t < planner::kNumStepTerms; ++t) {
      const double d = e.breakdown.seconds[static_cast<std::size_t>(t)] - first.breakdown.seconds[static_cast<std::size_t>(t)];
      if (std::abs(d) < 5e-6) continue;
      terms += fmt::format("{}{} {}", terms.empty() ? "" : ", ",
                           planner::step_term_info(static_cast<planner::StepTerm>(t)).name, signed_ms(d));
    }
    std::printf("%3d  %s: %s\n", i + 1, signed_ms(e.step_s - first.step_s).c_str(),
                terms.empty() ? "the same terms" : terms.c_str());
  }
}

// The `top` most frequent reasons the engine refused plans for, with their counts ("12 plans: ...; 8 plans: ...").
std::string frequent_refusals(const planner::SearchResult& result, std::size_t top) {
  std::map<std::string, int> counts;
  for (const auto& r : result.rejected) {
    if (!r.valid) counts[r.reason] += 1;
  }
  std::vector<std::pair<std::string, int>> sorted(counts.begin(), counts.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string out;
  for (std::size_t i = 0; i < std::min(top, sorted.size()); ++i) {
    out += fmt::format("{}{} plan{}: {}", i ? "; " : "", sorted[i].second, sorted[i].second == 1 ? "" : "s",
                       shorten_at_word(sorted[i].first, 200));
  }
  if (sorted.size() > top) out += fmt::format("; and {} other reasons", sorted.size() - top);
  return out.empty() ? "no plan was tried" : out;
}

// No plan fits the cap: the smallest need per category over the valid plans, and the plan that came closest.
[[noreturn]] void throw_nothing_fits(const planner::SearchResult& result, int world, const std::string& limit_text) {
  int invalid = 0, over = 0;
  for (const auto& r : result.rejected) (r.valid ? over : invalid) += 1;
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
  // No valid plan: the config against this world (a batch dp cannot divide, more stages than blocks, heads tp cannot
  // split, ...) is the command line's input, found before any run; the most frequent reasons say what to change.
  CLEAVE_CHECK_INPUT(closest != nullptr, "plan: none of the {} plans of {} is valid for this config: {}; change "
                     "--world or the config", result.rejected.size(), count_of(world, "rank"),
                     frequent_refusals(result, 3));
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

// --json: every plan that fits in the order shown, with the --trial measurements beside the predictions.
void write_plans_json(const std::string& json_path, const std::vector<const planner::PlanEstimate*>& ordered,
                      const std::vector<planner::Placed>& placed, const std::vector<planner::PredictedPlan>& predicted,
                      const TrialOutcome& trial, int world, const planner::HardwareProfile& profile,
                      const planner::SearchResult& result, double tie_within) {
  nlohmann::json plans = nlohmann::json::array();
  for (std::size_t i = 0; i < ordered.size(); ++i) {
    const auto& e = *ordered[i];
    plans.push_back({{"place", i + 1},
                     {"tie_group", placed[i].place},
                     {"memory_fraction", predicted[placed[i].index].memory_fraction},
                     {"layout", e.choice.layout()},
                     {"schedule", e.choice.schedule},
                     {"virtual_stages", e.choice.virtual_stages},
                     {"micro_batch", e.choice.micro_batch},
                     {"zero_stage", e.choice.zero_stage},
                     {"zero_reduce", std::string(enum_name(e.choice.zero_reduce))},
                     {"sequence_parallel", e.choice.sequence_parallel},
                     {"expert_parallel", e.choice.ep},
                     {"ep_imbalance", e.ep_imbalance},
                     {"ep_imbalance_source", std::string(enum_name(e.ep_imbalance_source))},
                     {"ep_memory_imbalance", {{"stash", e.ep_memory.stash}, {"peak", e.ep_memory.peak}}},
                     {"comm_bytes", e.comm_bytes},
                     {"recompute", std::string(enum_name(e.choice.recompute))},
                     {"overrides", e.choice.overrides()},
                     {"step_s", e.step_s},
                     {"items_per_s", e.items_per_s},
                     {"bubble", e.bubble},
                     {"peak_bytes", e.peak_bytes},
                     {"peak_rank", e.peak_rank}});
    if (e.host_pinned_bytes > 0) {  // the host line (a plan on a GPU): page-locked host memory, not in peak_bytes
      plans.back()["host_pinned_bytes"] = e.host_pinned_bytes;
      plans.back()["host_pinned_rank"] = e.host_pinned_rank;
    }
  }
  for (const auto& t : trial.ranked) {  // measured by --trial: beside the prediction, in the predicted order
    auto& entry = plans[static_cast<std::size_t>(t.predicted_place - 1)];
    const bool ok = t.measured.measured;
    entry["measured_step_s"] = ok ? nlohmann::json(t.measured.median_s) : nlohmann::json(nullptr);
    entry["measured_spread"] = ok && std::isfinite(t.measured.spread) ? nlohmann::json(t.measured.spread) : nlohmann::json(nullptr);
    entry["measured_rounds"] = t.round_medians;
    entry["measured_place"] = ok ? nlohmann::json(t.place) : nlohmann::json(nullptr);
    if (!t.round_steps.empty()) {  // --explain: the traced step row by row (engine/planner/measured_step.hpp)
      const auto rows = planner::compare_step(t.plan.breakdown, t.measured_step);
      nlohmann::json terms = nlohmann::json::array();
      for (const auto& r : rows) {
        terms.push_back({{"row", r.name}, {"predicted_s", r.predicted_s}, {"measured_s", r.measured_s},
                         {"predicted_terms", r.predicted_terms}});
      }
      entry["measured_terms"] = terms;
      entry["measured_terms_pp_rank"] = t.measured_step.rank;
      entry["traced_steps"] = t.round_steps.size();
      const planner::TermRow* worst = planner::largest_disagreement(rows);
      entry["largest_disagreement"] = worst ? nlohmann::json(worst->name) : nlohmann::json(nullptr);
    }
  }
  create_parent_dirs("plan: --json", json_path);
  std::ofstream out(json_path);
  out << nlohmann::json{{"world", world}, {"profile", profile.name}, {"memory_limit", result.memory_limit},
                        {"tie_within", tie_within}, {"plans", plans}}.dump(1)
      << "\n";
  CLEAVE_CHECK(out.good(), "plan: could not write {}", json_path);
}

// The search's header: the config, the profile and where it came from, the cap, and how ranks share the cores.
void print_header(const std::string& config_path, int world, const planner::HardwareProfile& profile,
                  const planner::SearchResult& result) {
  std::printf("cleave plan: %s on %d ranks | profile: %s\n  (%s)\n  memory cap per rank: %s\n",
              config_path.empty() ? "<defaults>" : config_path.c_str(), world, profile.name.c_str(),
              profile.source.c_str(), result.memory_limit > 0 ? format_bytes(result.memory_limit).c_str() : "none");
  if (profile.cores_per_node > 0) {  // ranks share a node's cores: say how the profile was taken and how it is scaled
    const int on_node = std::min(world, std::max(1, profile.ranks_per_node));
    std::printf("  cores: %d per node; the profile's compute was measured with %s on %s; %s per node planned%s: each "
                "computes on %.2f of a core, priced %.2fx the profile's compute\n",
                profile.cores_per_node, count_of(profile.measured_ranks_per_node, "rank").c_str(),
                count_of(profile.measured_cores > 0 ? profile.measured_cores : profile.cores_per_node, "core").c_str(),
                count_of(on_node, "rank").c_str(),
                profile.device_type == DeviceType::kCpu ? " (a cpu profile: every rank on the machine it describes)" : "",
                profile.cores_per_rank(on_node), profile.core_sharing(on_node));
  }
}

// The plans in the order shown: by predicted time, near-ties (within the model's stated error) to the more headroom.
struct Ordering {
  std::vector<planner::PredictedPlan> predicted;  // per plan of result.ranked: step and peak / cap
  std::vector<planner::Placed> placed;            // the order shown, with tie groups
  std::vector<const planner::PlanEstimate*> ordered;
  std::vector<std::string> tie_note;              // each row's "  tie #1-#3" suffix, or ""
};

Ordering order_plans(const planner::SearchResult& result, double tie_within) {
  Ordering o;
  std::int64_t largest_peak = 1;
  for (const auto& e : result.ranked) largest_peak = std::max(largest_peak, e.peak_bytes);
  const auto headroom_denominator = static_cast<double>(result.memory_limit > 0 ? result.memory_limit : largest_peak);
  std::vector<planner::PredictedPlan>& predicted = o.predicted;
  for (const auto& e : result.ranked) predicted.push_back({e.step_s, static_cast<double>(e.peak_bytes) / headroom_denominator});
  o.placed = planner::rank_predicted(predicted, tie_within);
  const std::vector<planner::Placed>& placed = o.placed;
  std::vector<const planner::PlanEstimate*>& ordered = o.ordered;
  for (const auto& p : placed) ordered.push_back(&result.ranked[p.index]);
  // Each tie group's rows ("#1-#3"), for the rows' suffix.
  std::vector<std::string>& tie_note = o.tie_note;
  tie_note.resize(placed.size());
  for (std::size_t i = 0; i < placed.size();) {
    std::size_t end = i + 1;
    while (end < placed.size() && placed[end].place == placed[i].place) ++end;
    if (end - i > 1) {
      for (std::size_t k = i; k < end; ++k) tie_note[k] = fmt::format("  tie #{}-#{}", i + 1, end);
    }
    i = end;
  }
  return o;
}

// Per ep of the shown plans, the imbalance they were priced at and where it came from (planner::choose_ep_imbalance):
// "ep imbalance: ep2 1.284 (measured by cleave profile: ...)".
void print_ep_imbalances(const std::vector<const planner::PlanEstimate*>& ordered, int shown,
                         const planner::HardwareProfile& profile) {
  std::vector<std::string> seen;
  for (int i = 0; i < shown; ++i) {
    const planner::PlanEstimate& e = *ordered[static_cast<std::size_t>(i)];
    if (e.choice.ep <= 1) continue;
    const planner::EpImbalance f{e.ep_imbalance, e.ep_imbalance_source};
    const std::string line = fmt::format("ep imbalance: ep{} plans priced at {:.3f}x the mean rows on the busiest ep "
                                         "rank: {}", e.choice.ep, f.value,
                                         planner::describe_ep_imbalance(f, profile.routing_imbalance));
    if (std::find(seen.begin(), seen.end(), line) != seen.end()) continue;
    seen.push_back(line);
    std::printf("%s\n", line.c_str());
  }
}

// The top `shown` plans as a table, the layouts that oversubscribe the cores, and the engine's most frequent refusal.
void print_plans(const planner::SearchResult& result, const Ordering& o, int shown, double tie_within,
                 const planner::HardwareProfile& profile) {
  const auto& ordered = o.ordered;
  const auto& tie_note = o.tie_note;
  int invalid = 0, over = 0;
  for (const auto& r : result.rejected) (r.valid ? over : invalid) += 1;
  std::printf("\nplans predicted within %.1f%% of their group's fastest are tied (the model's stated error, "
              "--tie-within); a tie goes to the lowest peak %s where peaks differ by more than %.0f%% of %s, "
              "else to the faster\n",
              100 * tie_within, result.memory_limit > 0 ? "/ cap" : "memory", 100 * planner::kHeadroomMargin,
              result.memory_limit > 0 ? "the cap" : "the largest");
  // The host line's column only where a shown plan pins host memory (a plan on a GPU): CPU tables unchanged.
  const bool pinned = std::any_of(ordered.begin(), ordered.begin() + shown,
                                  [](const planner::PlanEstimate* e) { return e->host_pinned_bytes > 0; });
  // The layout column fits the longest shown layout (cp and ep add words: "tp1 cp4 pp1 dp1 ep2").
  int layout_width = 13;
  for (int i = 0; i < shown; ++i) {
    layout_width = std::max(layout_width, static_cast<int>(ordered[static_cast<std::size_t>(i)]->choice.layout().size()));
  }
  std::printf("%3s  %-*s %2s %-17s %5s %4s %2s %-9s %10s %12s %7s%s  %s\n", "#", layout_width, "layout", "v", "schedule", "micro",
              "zero", "sp", "recompute", "step ms", (result.unit + "/s").c_str(), "bubble",
              pinned ? fmt::format(" {:>12}", "host pinned").c_str() : "", "peak memory / rank");
  for (int i = 0; i < shown; ++i) {
    const auto& e = *ordered[static_cast<std::size_t>(i)];
    std::printf("%3d  %-*s %2d %-17s %5lld %4s %2s %-9s %10s %12.0f %7.3f%s  %s (pp rank %d)%s%s\n", i + 1,
                layout_width, e.choice.layout().c_str(), e.choice.virtual_stages, e.choice.schedule.c_str(),
                static_cast<long long>(e.choice.micro_batch), e.choice.zero_label().c_str(), e.choice.sequence_parallel ? "y" : "-", std::string(enum_name(e.choice.recompute)).c_str(),
                ms(e.step_s).c_str(), e.items_per_s, e.bubble,
                pinned ? fmt::format(" {:>12}", e.host_pinned_bytes > 0 ? format_bytes(e.host_pinned_bytes) : "-").c_str() : "",
                format_bytes(e.peak_bytes).c_str(), e.peak_rank,
                result.memory_limit > 0
                    ? fmt::format(" = {:.0f}% of cap", 100.0 * static_cast<double>(e.peak_bytes) / static_cast<double>(result.memory_limit)).c_str()
                    : "",
                tie_note[static_cast<std::size_t>(i)].c_str());
  }
  if (pinned) {
    std::printf("host pinned: the page-locked host memory a rank holds on a GPU (the largest over pp ranks): the "
                "step's staged micro-batches, the losses row and moe routing uploads; host memory, not in the peak "
                "memory and not under the cap, but under the host's page-locked limit (ulimit -l)\n");
  }
  print_ep_imbalances(ordered, shown, profile);
  // Layouts that put more ranks on a node than it has cores: priced by their share of the cores, and said so.
  std::vector<std::string> warned;
  for (int i = 0; i < shown; ++i) {
    const auto& e = *ordered[static_cast<std::size_t>(i)];
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
}

// --trial with --explain: per plan trained, its measured step against the prediction row by row (the kinds of
// action a timeline times apart, engine/planner/measured_step.hpp), and the row that disagrees most.
void print_trial_terms(const TrialOutcome& trial) {
  std::vector<const TrialResult*> by_prediction;
  for (const auto& t : trial.ranked) by_prediction.push_back(&t);
  std::sort(by_prediction.begin(), by_prediction.end(),
            [](const TrialResult* a, const TrialResult* b) { return a->predicted_place < b->predicted_place; });
  std::printf("\npredicted against measured, term by term: each round's last step (train.trace's timeline) on the "
              "plan's busiest predicted pp rank, the median per row over the rounds; tp/cp/ep collectives and ZeRO-3 "
              "gathers run inside the F/I/W spans and are compared with them; idle time before a tensor from a peer "
              "is bubble until the peer sent it, point_to_point after:\n");
  for (const TrialResult* t : by_prediction) {
    const auto& c = t->plan.choice;
    std::printf("plan #%d %s %s v%d micro %lld zero %s%s recompute %s, pp rank %d:", t->predicted_place,
                c.layout().c_str(), c.schedule.c_str(), c.virtual_stages, static_cast<long long>(c.micro_batch),
                c.zero_label().c_str(), c.sequence_parallel ? " sp" : "", std::string(enum_name(c.recompute)).c_str(),
                t->plan.breakdown.rank);
    if (t->round_steps.empty()) {
      std::printf(" no traced step (%s)\n", t->error.empty() ? "no trace.json was read" : t->error.c_str());
      continue;
    }
    std::printf(" %zu traced step(s); the trial's median step %s ms\n", t->round_steps.size(),
                t->measured.measured ? ms(t->measured.median_s).c_str() : "-");
    for (const auto& line : planner::comparison_table(planner::compare_step(t->plan.breakdown, t->measured_step))) {
      std::printf("%s\n", line.c_str());
    }
  }
}

// --trial: the top `trials` plans trained for real in interleaved rounds, predicted against measured, re-ranked
// where the measurement is clear; with --explain each plan's traced step against its prediction, term by term.
TrialOutcome trial_plans(const Args& args, const std::string& config_path, const std::vector<std::string>& overrides,
                         const Ordering& o, const planner::SearchResult& result, const std::string& limit_text,
                         int world, int trials, bool explain) {
  const auto& ordered = o.ordered;
  TrialOutcome trial;
  TrialOptions to;
  to.world = world;
  to.steps = static_cast<int>(args.count("--trial-steps"));
  to.max_rounds = static_cast<int>(args.count("--trial-rounds"));
  to.spread_bound = args.number("--trial-spread");
  to.budget_s = args.number("--trial-budget");
  to.launcher = args.text("--launcher");
  to.memory_limit = limit_text.empty() ? 0 : result.memory_limit;
  to.measure_terms = explain;
  const auto launcher = trial_launcher(to.launcher, world);
  std::string launch;
  for (const auto& w : launcher) launch += (launch.empty() ? "" : " ") + w;
  std::vector<planner::PlanEstimate> top_plans;
  for (int i = 0; i < std::min<int>(trials, static_cast<int>(ordered.size())); ++i) top_plans.push_back(*ordered[static_cast<std::size_t>(i)]);
  std::printf("\ntrial: the top %zu plans in interleaved rounds of %d steps each (%s cleave train ...; a run's figure "
              "is its median step after the first %d); rounds until every spread <= %.1f%% (at least %d rounds), "
              "at most %d rounds or %s:\n", top_plans.size(), to.steps, launch.c_str(), kTrialWarmupSteps,
              100 * to.spread_bound, std::min(kTrialMinRounds, to.max_rounds), to.max_rounds,
              format_seconds(to.budget_s).c_str());
  std::fflush(stdout);
  trial = run_trials(config_path, overrides, top_plans, to);
  int layout_width = 13;  // as print_plans: the longest layout
  for (const auto& t : trial.ranked) layout_width = std::max(layout_width, static_cast<int>(t.plan.choice.layout().size()));
  std::printf("%9s %3s  %-*s %2s %-17s %5s %4s %2s %-9s %10s %10s %8s %6s %9s\n", "measured", "#", layout_width, "layout", "v",
              "schedule", "micro", "zero", "sp", "recompute", "pred ms", "meas ms", "spread", "rounds", "pred/meas");
  for (const auto& t : trial.ranked) {
    const auto& c = t.plan.choice;
    const bool ok = t.measured.measured;
    const std::string place = ok ? fmt::format("{:>9}", fmt::format("{}{}", t.place, t.tied ? "=" : "")) : fmt::format("{:>9}", "failed");
    const std::string spread = !ok ? "-" : std::isfinite(t.measured.spread) ? fmt::format("{:.1f}%", 100 * t.measured.spread) : "-";
    std::printf("%s %3d  %-*s %2d %-17s %5lld %4s %2s %-9s %10s %10s %8s %6zu %9s%s\n", place.c_str(), t.predicted_place,
                layout_width, c.layout().c_str(), c.virtual_stages, c.schedule.c_str(), static_cast<long long>(c.micro_batch),
                c.zero_label().c_str(), c.sequence_parallel ? "y" : "-", std::string(enum_name(c.recompute)).c_str(), ms(t.plan.step_s).c_str(),
                ok ? ms(t.measured.median_s).c_str() : "-", spread.c_str(), t.round_medians.size(),
                ok ? fmt::format("{:.2f}", t.plan.step_s / t.measured.median_s).c_str() : "-",
                ok ? "" : ("  " + t.error).c_str());
  }
  std::printf("stopped: %s. Spread = (max - min) / 2 / median of a plan's round medians; a plan moves ahead only of "
              "plans whose range it clears (median x (1 +- spread)), '=' marks overlapping ranges\n",
              trial.stopped.c_str());
  CLEAVE_CHECK(!trial.ranked.empty() && trial.ranked.front().measured.measured,
               "plan --trial: none of the {} plans trained ({}); run one by hand with --write and `mpiexec -n {} "
               "cleave train`", trial.ranked.size(), trial.ranked.empty() ? "-" : trial.ranked.front().error, world);
  const auto& front = trial.ranked.front();
  if (front.predicted_place != 1) {
    std::string first = "failed";
    for (const auto& t : trial.ranked) {
      if (t.predicted_place == 1 && t.measured.measured) first = ms(t.measured.median_s) + " ms";
    }
    std::printf("re-ranked by measurement: plan #%d measured clearly faster (%s ms against #1's %s)\n",
                front.predicted_place, ms(front.measured.median_s).c_str(), first.c_str());
  } else if (front.tied) {
    const auto overlapping = std::count_if(trial.ranked.begin(), trial.ranked.end(),
                                           [&](const TrialResult& t) { return t.place == front.place; });
    std::printf("the planner's #1 stays first: no plan measured clearly faster (the first %ld overlap)\n",
                static_cast<long>(overlapping));
  } else {
    std::printf("the planner's #1 measured clearly fastest\n");
  }
  if (explain) print_trial_terms(trial);
  return trial;
}

// --write: the best plan (the measured first after --trial) as a config `cleave train` runs unchanged.
void write_best_plan(const std::string& write_path, const std::string& config_path,
                     const std::vector<std::string>& overrides, const planner::PlanEstimate& best, int best_place,
                     const planner::HardwareProfile& profile, const planner::SearchResult& result,
                     const std::string& limit_text, int world) {
  std::vector<std::string> all = overrides;
  for (const auto& o : best.choice.overrides()) all.push_back(o);
  config::RunConfig chosen = config::load_config(config_path, all);
  chosen.device.type = planner::planned_device(chosen, profile);  // the device the plan was estimated for
  // The cap asked for on the command line travels with the plan: training then refuses a plan over it and
  // the allocator enforces it (a cap from the config is there already).
  if (!limit_text.empty()) chosen.device.memory_limit = result.memory_limit;
  // The plan is a new run: its own train.out_dir beside the source's, named after the plan file (the source's
  // directory may already hold the run the plan was made from, and train refuses to write over a run).
  const std::string source_out_dir = chosen.train.out_dir;
  chosen.train.out_dir = plan_out_dir(source_out_dir, write_path);
  create_parent_dirs("plan: --write", write_path);
  std::ofstream out(write_path);
  out << config::to_json(chosen) << "\n";
  CLEAVE_CHECK(out.good(), "plan: could not write {}", write_path);
  std::printf("\nwrote plan #%d to %s (train.out_dir %s, a fresh directory; the source config's was %s): "
              "mpirun -np %d cleave train %s\n",
              best_place, write_path.c_str(), chosen.train.out_dir.c_str(), source_out_dir.c_str(), world, write_path.c_str());
}

}  // namespace

int run_plan(int argc, char** argv) {
  const ArgParser parser = plan_args();
  const Args args = parser.parse(argc, argv);
  if (parser.print_help_if_asked(args)) return 0;
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
  const double tie_within = args.number("--tie-within");
  CLEAVE_CHECK_INPUT(world >= 1, "plan: --world N is required (the number of ranks to plan for)");
  CLEAVE_CHECK_INPUT(write_path.empty() || !std::filesystem::exists(write_path),
               "plan: --write {} exists; not overwriting it", write_path);
  CLEAVE_CHECK_INPUT(json_path.empty() || !std::filesystem::exists(json_path), "plan: --json {} exists; not overwriting it",
               json_path);
  // Before the search (minutes at a large --world): a path that cannot be written fails now, not after it.
  if (!write_path.empty()) check_output_file("plan: --write", write_path);
  if (!json_path.empty()) check_output_file("plan: --json", json_path);
  check_distinct_outputs("plan", {{"--write", write_path}, {"--json", json_path}});
  // An option that would be accepted and do nothing is refused, before the machine is measured.
  for (const char* only_trial : {"--trial-steps", "--trial-rounds", "--trial-spread", "--trial-budget", "--launcher"}) {
    CLEAVE_CHECK_INPUT(trials > 0 || !args.given(only_trial),
                 "plan: {} sets how --trial K trains the top plans, and no --trial was given; add --trial K or drop {}",
                 only_trial, only_trial);
  }
  // --trial's launcher, before the machine is measured and the plans searched (it failed after them, exit 1).
  if (trials > 0) {
    const std::string program = trial_launcher(args.text("--launcher"), world).front();
    CLEAVE_CHECK_INPUT(can_execute(program), "plan --trial: cannot start the launcher '{}' ({}); nothing was searched "
                       "(install Open MPI's mpiexec or name the launcher with --launcher)", program,
                       why_not_executable(program));
  }
  const config::RunConfig base = config::load_config(config_path, overrides);
  const double ep_imbalance = args.number("--ep-imbalance");
  CLEAVE_CHECK_INPUT(ep_imbalance == 0 || ep_imbalance >= 1,
               "plan: --ep-imbalance {} is below 1 (the busiest rank's rows over the mean); use 0 for the default "
               "(the profile's measured figure at the plan's ep, else the workload's) or a value >= 1", ep_imbalance);
  CLEAVE_CHECK_INPUT(ep_imbalance == 0 || partition::routed_experts(run_plan::model_spec(base.model)) > 0,
               "plan: --ep-imbalance {} prices expert parallelism, and model.type {} has no experts (only \"moe\" "
               "has); drop --ep-imbalance", ep_imbalance, base.model.type);
  const partition::EpMemoryImbalance ep_memory = ep_memory_imbalance(args, "plan", base);

  // A --profile measured for another model or precision cannot serve this config: the command line's input (exit 64),
  // as a missing or malformed one is. This machine measured now always fits.
  auto [profile, options] = profile_path.empty()
                                ? planner::planning_setup(base, profile_path, limit_text, world)
                                : reading_input([&] { return planner::planning_setup(base, profile_path, limit_text, world); });
  if (const auto w = partition::load_warning(profile.load_check, profile.name)) std::fprintf(stderr, "warning: %s\n", w->c_str());
  options.ep_imbalance = ep_imbalance;
  options.ep_memory = ep_memory;
  const planner::SearchResult result = planner::search_plans(config_path, overrides, profile, options);

  print_header(config_path, world, profile, result);
  if (result.ranked.empty()) throw_nothing_fits(result, world, limit_text);
  const Ordering o = order_plans(result, tie_within);
  const int shown = std::min<int>(top, static_cast<int>(o.ordered.size()));
  print_plans(result, o, shown, tie_within, profile);
  if (explain) print_explain(o.ordered, shown);
  const TrialOutcome trial =
      trials > 0 ? trial_plans(args, config_path, overrides, o, result, limit_text, world, trials, explain) : TrialOutcome{};
  if (!json_path.empty()) write_plans_json(json_path, o.ordered, o.placed, o.predicted, trial, world, profile, result, tie_within);
  if (!write_path.empty()) {
    const bool measured = !trial.ranked.empty();
    write_best_plan(write_path, config_path, overrides, measured ? trial.ranked.front().plan : *o.ordered.front(),
                    measured ? trial.ranked.front().predicted_place : 1, profile, result, limit_text, world);
  }
  return 0;
}

}  // namespace cleave::cli

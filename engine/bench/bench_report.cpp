// See bench_report.hpp.
#include "engine/bench/bench_report.hpp"

#include <fmt/format.h>

#include "engine/core/allocator.hpp"
#include "partition/measured_costs.hpp"
#include "pipeline/trace.hpp"

namespace cleave::bench {
namespace {

using nlohmann::json;

template <typename T, typename F>
std::string joined(const std::vector<T>& values, F format) {
  std::string out;
  for (const auto& v : values) {
    if (!out.empty()) out += ' ';
    out += format(v);
  }
  return out;
}

std::string per_rank_bubbles(const pipeline::TimelineStats& stats, bool stage_definition) {
  return joined(stats.ranks, [&](const pipeline::RankStats& r) {
    return fmt::format("{:.3f}", stage_definition ? r.stage_bubble_fraction : r.bubble_fraction);
  });
}

std::string escape_html(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

// Per pp rank, every action as [name, start ms, end ms] (times relative to the step's first action).
json timeline_json(const pipeline::Timeline& timeline) {
  const double origin = pipeline::timeline_stats(timeline).start;
  json ranks = json::array();
  for (const auto& rank : timeline.ranks) {
    json actions = json::array();
    for (const auto& t : rank) {
      actions.push_back({pipeline::format_action(t.action), partition::file_number(t.start - origin),
                         partition::file_number(t.end - origin)});
    }
    ranks.push_back(std::move(actions));
  }
  return ranks;
}

}  // namespace

std::string summary_table(const BenchSetup& setup, const std::vector<ScheduleRun>& runs,
                          const std::vector<SkippedSchedule>& skipped) {
  std::string out = fmt::format("cleave bench: {} | {} steps after {} warm-up | {}\n", setup.layout, setup.steps,
                                setup.warmup, setup.machine.describe());
  out += fmt::format("{:<20} {:>6} {:>4} {:>9} {:>10} {:>10} {:>9} {:>7} {:>7} {:>7} {:>7}  {:<22} {:<22} {}\n", "schedule",
                     "stages", "m", "step_ms", "tok/s", "makespan", "predicted", "ratio", "bubble", "sim", "replay",
                     "bubble/rank", "peak/rank", "p2p/rank/step");
  for (const auto& r : runs) {
    out += fmt::format("{:<20} {:>6} {:>4} {:>9.2f} {:>10.0f} {:>10.2f} {:>9.2f} {:>7.2f} {:>7.3f} {:>7.3f} {:>7.3f}  {:<22} {:<22} {}\n",
                       r.choice.label(), r.stages, r.microbatches, r.median_step_ms, r.tokens_per_s,
                       r.measured_stats.makespan, r.predicted.stats.makespan,
                       ratio(r.measured_stats.makespan, r.predicted.stats.makespan), r.measured_stats.bubble_fraction,
                       r.predicted.stats.bubble_fraction, r.replayed.stats.bubble_fraction,
                       per_rank_bubbles(r.measured_stats, false),
                       joined(r.peak_bytes, [](std::int64_t b) { return format_bytes(b); }),
                       joined(r.p2p_bytes, [](std::int64_t b) { return format_bytes(b); }));
  }
  for (const auto& k : skipped) out += fmt::format("{:<20} not run: {}\n", k.choice.label(), k.reason);
  out += "step_ms: median whole-step wall time. makespan: the median step's pipeline span (ms); predicted:\n"
         "the simulator's for that step's per-stage F/I/W (and reduction, optimizer) means, P2P from a ping-pong fit; bubble: idle / (ranks x makespan),\n"
         "measured and simulated (docs/schedules.md; the per-stage definition is in bench.json and bench.html);\n"
         "replay: the simulator given every action's own measured duration (measured above replay = waits beyond\n"
         "compute and the link; replay above sim = the cost of action-to-action variation).\n";
  if (const std::string w = single_copy_warning(setup.machine); !w.empty()) out += "WARNING: " + w + "\n";
  if (setup.machine.oversubscribed) {
    out += "WARNING: more ranks than cores: ranks share cores, so a waiting rank's idle time is spent running\n"
           "another rank and measured bubbles read low. Use at most one rank per core for bubble figures.\n";
  }
  return out;
}

json bench_json(const BenchSetup& setup, const std::vector<ScheduleRun>& runs,
                const std::vector<SkippedSchedule>& skipped) {
  const BenchMachine& m = setup.machine;
  json out = {{"config", setup.config_path},
              {"overrides", setup.overrides},
              {"layout", setup.layout},
              {"steps", setup.steps},
              {"warmup", setup.warmup},
              {"machine",
               {{"cpu", m.cpu_model},
                {"cores", m.cores},
                {"ranks_on_node", m.ranks_on_node},
                {"threads_per_rank", m.threads_per_rank},
                {"binding_rank0", m.binding},
                {"mpi_single_copy", m.mpi_single_copy},
                {"mpi_progress_thread", m.mpi_progress_thread},
                {"oversubscribed", m.oversubscribed}}},
              {"schedules", json::array()},
              {"skipped", json::array()}};
  for (const auto& k : skipped) {
    out["skipped"].push_back({{"schedule", k.choice.name}, {"label", k.choice.label()}, {"reason", k.reason}});
  }
  for (const auto& r : runs) {
    json ranks = json::array();
    for (std::size_t i = 0; i < r.measured_stats.ranks.size(); ++i) {
      const auto& mr = r.measured_stats.ranks[i];
      const auto& pr = r.predicted.stats.ranks[i];
      ranks.push_back({{"pp_rank", mr.rank},
                       {"busy_ms", mr.busy},
                       {"bubble_fraction", mr.bubble_fraction},
                       {"stage_bubble_fraction", mr.stage_bubble_fraction},
                       {"predicted_bubble_fraction", pr.bubble_fraction},
                       {"predicted_stage_bubble_fraction", pr.stage_bubble_fraction}});
    }
    json costs = json::array();
    for (const auto& c : r.costs.stages) {
      costs.push_back({{"forward_ms", c.forward}, {"backward_input_ms", c.backward_input},
                       {"backward_weight_ms", c.backward_weight}});
    }
    out["schedules"].push_back({{"schedule", r.choice.name},
                                {"label", r.choice.label()},
                                {"stages", r.stages},
                                {"pp_size", r.pp_size},
                                {"microbatches", r.microbatches},
                                {"first_loss", r.first_loss},
                                {"step_ms", r.step_ms},
                                {"median_step_ms", r.median_step_ms},
                                {"tokens_per_s", r.tokens_per_s},
                                {"measured",
                                 {{"makespan_ms", r.measured_stats.makespan},
                                  {"bubble_fraction", r.measured_stats.bubble_fraction},
                                  {"stage_bubble_fraction", r.measured_stats.stage_bubble_fraction}}},
                                {"predicted",
                                 {{"makespan_ms", r.predicted.stats.makespan},
                                  {"bubble_fraction", r.predicted.stats.bubble_fraction},
                                  {"stage_bubble_fraction", r.predicted.stats.stage_bubble_fraction}}},
                                {"replayed",
                                 {{"makespan_ms", r.replayed.stats.makespan},
                                  {"bubble_fraction", r.replayed.stats.bubble_fraction},
                                  {"stage_bubble_fraction", r.replayed.stats.stage_bubble_fraction}}},
                                {"measured_costs_per_stage", costs},
                                {"timelines", {{"measured", timeline_json(r.measured)},
                                               {"replayed", timeline_json(r.replayed.timeline)},
                                               {"predicted", timeline_json(r.predicted.timeline)}}},
                                {"p2p_fit", {{"latency_us", r.p2p_fit.latency_s * 1e6},
                                             {"bandwidth_GBps", r.p2p_fit.bandwidth_Bps / 1e9}}},
                                {"pp_ranks", ranks},
                                {"peak_bytes_per_rank", r.peak_bytes},
                                {"peak_activation_bytes_per_rank", r.peak_activations},
                                {"p2p_bytes_per_rank_per_step", r.p2p_bytes}});
  }
  return out;
}

std::string bench_html(const BenchSetup& setup, const std::vector<ScheduleRun>& runs,
                       const std::vector<SkippedSchedule>& skipped) {
  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>cleave bench</title>\n<style>\n"
      "body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;font-size:13px}\n"
      "th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f0f0f0}td.l{text-align:left}\n"
      ".warn{background:#fff3cd;border:1px solid #e0b000;padding:8px;margin:8px 0}h2{margin-top:32px}\n"
      // Timelines scale down to the page width (their viewBox keeps the proportions) rather than each
      // scrolling on its own at 2,000+ px.
      ".tl{border:1px solid #ddd;margin:6px 0}.tl svg{display:block;max-width:100%;height:auto}\n"
      "</style></head><body>\n";
  html += fmt::format("<h1>cleave bench</h1>\n<p>{} &middot; config {} {} &middot; {} measured steps after {} warm-up</p>\n",
                      escape_html(setup.layout), escape_html(setup.config_path),
                      escape_html(joined(setup.overrides, [](const std::string& s) { return "--set " + s; })),
                      setup.steps, setup.warmup);
  html += fmt::format("<p>Machine: {}</p>\n", escape_html(setup.machine.describe()));
  if (const std::string w = single_copy_warning(setup.machine); !w.empty()) {
    html += "<p class=\"warn\">" + escape_html(w) + "</p>\n";
  }
  if (setup.machine.oversubscribed) {
    html += "<p class=\"warn\">More ranks than cores: ranks share cores, so a waiting rank's idle time runs another "
            "rank and the measured bubbles read low. Use at most one rank per core for bubble figures.</p>\n";
  }
  html += "<table><tr><th>schedule</th><th>stages</th><th>micro-batches</th><th>step ms (median)</th><th>tokens/s</th>"
          "<th>makespan ms</th><th>predicted ms</th><th>measured / predicted</th><th>bubble</th><th>predicted bubble</th>"
          "<th>stage bubble</th><th>predicted stage bubble</th><th>bubble per rank</th><th>peak memory per rank</th>"
          "<th>P2P bytes per rank per step</th></tr>\n";
  for (const auto& r : runs) {
    html += fmt::format(
        "<tr><td class=\"l\"><a href=\"#{0}\">{0}</a></td><td>{1}</td><td>{2}</td><td>{3:.2f}</td><td>{4:.0f}</td>"
        "<td>{5:.2f}</td><td>{6:.2f}</td><td>{7:.2f}</td><td>{8:.3f}</td><td>{9:.3f}</td><td>{10:.3f}</td><td>{11:.3f}</td>"
        "<td class=\"l\">{12}</td><td class=\"l\">{13}</td><td class=\"l\">{14}</td></tr>\n",
        escape_html(r.choice.label()), r.stages, r.microbatches, r.median_step_ms, r.tokens_per_s,
        r.measured_stats.makespan, r.predicted.stats.makespan,
        ratio(r.measured_stats.makespan, r.predicted.stats.makespan), r.measured_stats.bubble_fraction,
        r.predicted.stats.bubble_fraction, r.measured_stats.stage_bubble_fraction,
        r.predicted.stats.stage_bubble_fraction, per_rank_bubbles(r.measured_stats, false),
        joined(r.peak_bytes, [](std::int64_t b) { return format_bytes(b); }),
        joined(r.p2p_bytes, [](std::int64_t b) { return format_bytes(b); }));
  }
  for (const auto& k : skipped) {
    html += fmt::format("<tr class=\"skipped\"><td class=\"l\">{}</td><td class=\"l\" colspan=\"14\">not run: {}</td></tr>\n",
                        escape_html(k.choice.label()), escape_html(k.reason));
  }
  html += "</table>\n<p>Bubble: idle time over ranks &times; makespan; stage bubble: idle inside each rank's own "
          "first-to-last span (docs/schedules.md). Predicted: the simulator run on this schedule with the per-stage "
          "forward, input-gradient and weight-gradient times measured in the median step, and each boundary tensor "
          "costing latency + bytes / bandwidth from a ping-pong fit between rank pairs timed after the steps.</p>\n";
  for (const auto& r : runs) {
    pipeline::TraceOptions predicted_options;
    predicted_options.title = fmt::format("{}: predicted (simulator, measured costs)", r.choice.label());
    predicted_options.subtitle = fmt::format("makespan {:.2f} ms, bubble {:.3f}", r.predicted.stats.makespan,
                                             r.predicted.stats.bubble_fraction);
    pipeline::TraceOptions measured_options;
    measured_options.title = fmt::format("{}: measured (the median step)", r.choice.label());
    measured_options.subtitle = fmt::format("makespan {:.2f} ms, bubble {:.3f}, step {:.2f} ms",
                                            r.measured_stats.makespan, r.measured_stats.bubble_fraction,
                                            r.median_step_ms);
    html += fmt::format("<h2 id=\"{0}\">{0}</h2>\n<div class=\"tl\">{1}</div>\n<div class=\"tl\">{2}</div>\n",
                        escape_html(r.choice.label()),
                        pipeline::timeline_svg(r.predicted.lowered, r.predicted.timeline, predicted_options),
                        pipeline::timeline_svg(r.schedule, r.measured, measured_options));
  }
  html += "</body></html>\n";
  return html;
}

}  // namespace cleave::bench

// The run report page (html_report.hpp).
#include "engine/report/html_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "engine/core/allocator.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/report/svg_chart.hpp"

namespace cleave::report {
namespace {

constexpr const char* kStyle = R"(body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1340px}
h1{font-size:20px}h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ddd}
.charts{display:flex;flex-wrap:wrap;gap:12px}.chart{background:#fff;border:1px solid #e3e3e3}
.chart .title{font-weight:600;font-size:13px}.chart text{font-size:11px;fill:#333}
.chart .ytick{text-anchor:end}.chart .xtick,.chart .xlabel{text-anchor:middle}.chart .ylabel{text-anchor:middle}
.chart .plot{fill:none;stroke:#bbb}.chart .grid{stroke:#eee}.chart .cap{stroke:#d62728;stroke-dasharray:4 3}
.chart .captext{fill:#d62728;text-anchor:middle}.chart .xmarkertext{fill:#d62728}.chart .marker{fill:#222}.chart .note{fill:#888}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f5f5f5}td.l,th.l{text-align:left}pre{background:#f7f7f7;padding:12px;overflow:auto;font-size:12px}
.summary td{text-align:left}
)";

// Colours by category name (unknown categories cycle through the rest).
const char* category_color(const std::string& name, std::size_t index) {
  if (name == "parameters") return "#1f77b4";
  if (name == "gradients") return "#ff7f0e";
  if (name == "optimizer_state") return "#2ca02c";
  if (name == "activations") return "#9467bd";
  if (name == "communication") return "#8c564b";
  if (name == "workspace") return "#7f7f7f";
  static constexpr const char* kOthers[] = {"#e377c2", "#bcbd22", "#17becf"};
  return kOthers[index % 3];
}

// The samples of one series drawn: all of them up to kMaxPoints, else every stride-th finite sample and the
// last one, so a 100k-step run gives a page of a few hundred KiB, not tens of MiB.
constexpr std::size_t kMaxPoints = 4000;

std::size_t thin(std::vector<double>& x, std::vector<double>& y) {
  std::vector<std::size_t> finite;
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (std::isfinite(x[i]) && std::isfinite(y[i])) finite.push_back(i);
  }
  if (finite.size() <= kMaxPoints) return 1;
  const std::size_t stride = (finite.size() + kMaxPoints - 1) / kMaxPoints;
  std::vector<double> tx, ty;
  for (std::size_t k = 0; k < finite.size(); ++k) {
    if (k % stride != 0 && k + 1 != finite.size()) continue;
    tx.push_back(x[finite[k]]);
    ty.push_back(y[finite[k]]);
  }
  x = std::move(tx);
  y = std::move(ty);
  return stride;
}

std::string chart(const MetricsTable& m, std::string title, const std::string& y_label,
                  std::vector<std::pair<std::string, std::string>> keys_and_colors, bool markers_for_sparse = true);

// Mixture-of-experts runs (metrics.jsonl moe_* fields, engine/train/router_metrics.hpp): the auxiliary losses,
// the load imbalance (max / mean tokens per expert) and the tokens each expert received per step.
std::string expert_load_section(const MetricsTable& m) {
  static constexpr const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                                            "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  std::vector<std::pair<std::string, std::string>> experts;
  for (int e = 0; m.column(fmt::format("moe_tokens_e{}", e)); ++e) {
    experts.emplace_back(fmt::format("moe_tokens_e{}", e), kColors[e % 10]);
  }
  std::string html = "<h2>Expert load</h2>\n<div class=\"charts\">\n";
  html += chart(m, "router losses (per micro-batch, all blocks)", "loss",
                {{"moe_aux_loss", "#1f77b4"}, {"moe_z_loss", "#d62728"}}, false);
  html += chart(m, "load imbalance (max / mean tokens per expert, mean over blocks)", "ratio",
                {{"moe_load_imbalance", "#ff7f0e"}}, false);
  html += chart(m, "tokens per expert (all blocks, global batch)", "tokens", experts, false);
  return html + "</div>\n";
}

std::string chart(const MetricsTable& m, std::string title, const std::string& y_label,
                  std::vector<std::pair<std::string, std::string>> keys_and_colors, bool markers_for_sparse) {
  LineChart c;
  c.x_label = "step";
  c.y_label = y_label;
  for (const auto& [key, color] : keys_and_colors) {
    if (!m.column(key)) continue;  // no row has it (a run without evaluation): no empty legend entry
    Series s;
    s.name = key;
    s.color = color;
    s.x = m.steps;
    s.y = *m.column(key);
    const auto finite = std::count_if(s.y.begin(), s.y.end(), [](double v) { return std::isfinite(v); });
    s.markers = markers_for_sparse && finite > 0 && finite < static_cast<long>(s.y.size()) / 2 + 1 &&
                finite <= 200;
    const std::size_t stride = thin(s.x, s.y);
    if (stride > 1) title += fmt::format(" (one point per {} samples of {})", stride, finite);
    c.series.push_back(std::move(s));
  }
  // Where the run resumed from a checkpoint (metrics.jsonl "resumed_at_step" on the first row after it).
  if (const auto* resumed = m.column("resumed_at_step")) {
    for (double step : *resumed) {
      if (std::isfinite(step)) c.x_markers.push_back(step);
    }
    c.x_marker_label = "resumed";
  }
  c.title = std::move(title);
  return line_chart_svg(c);
}

struct ColumnStats {
  int n = 0;
  double first = std::nan("");
  double last = std::nan("");
  double min = std::nan("");
  double max = std::nan("");
  double sum = 0;
};

ColumnStats stats_of(const MetricsTable& m, const std::string& key, std::size_t skip = 0) {
  ColumnStats s;
  const auto* c = m.column(key);
  if (!c) return s;
  for (std::size_t i = skip; i < c->size(); ++i) {
    const double v = (*c)[i];
    if (!std::isfinite(v)) continue;
    if (s.n == 0) s.first = s.min = s.max = v;
    s.last = v;
    s.min = std::min(s.min, v);
    s.max = std::max(s.max, v);
    s.sum += v;
    ++s.n;
  }
  return s;
}

std::string row(const std::string& key, const std::string& value) {
  return fmt::format("<tr><th class=\"l\">{}</th><td>{}</td></tr>\n", xml_escape(key), xml_escape(value));
}

std::string summary_table(const RunFiles& run) {
  const MetricsTable& m = run.metrics;
  const std::string unit = run.summary ? run.summary->throughput_unit : std::string("items");
  std::string html = "<table class=\"summary\">\n";
  html += row("steps", fmt::format("{} rows, steps {} to {}", m.steps.size(), m.steps.front(), m.steps.back()));
  const ColumnStats loss = stats_of(m, "loss");
  if (loss.n > 0) {
    html += row("train loss", fmt::format("{:.4f} -> {:.4f} (min {:.4f})", loss.first, loss.last, loss.min));
  }
  const ColumnStats eval = stats_of(m, "eval_loss");
  if (eval.n > 0) html += row("eval loss", fmt::format("{:.4f} (last of {} evaluations)", eval.last, eval.n));
  const ColumnStats accuracy = stats_of(m, "eval_accuracy");
  if (accuracy.n > 0) html += row("eval accuracy", fmt::format("{:.2f}%", 100.0 * accuracy.last));
  // The first step pays for warm-up (allocations, thread start): left out of the means when there are more.
  const std::size_t skip = m.steps.size() > 1 ? 1 : 0;
  const ColumnStats rate = stats_of(m, "tokens_per_s", skip);
  if (rate.n > 0) html += row("throughput", fmt::format("{} {}/s mean (after step 1)", format_number(rate.sum / rate.n), unit));
  const ColumnStats ms = stats_of(m, "step_ms", skip);
  if (ms.n > 0) html += row("step time", fmt::format("{:.1f} ms mean, {:.1f} ms max (after step 1)", ms.sum / ms.n, ms.max));
  const ColumnStats tflops = stats_of(m, "tflops_per_rank", skip);
  if (tflops.n > 0) {
    const ColumnStats mfu = stats_of(m, "mfu", skip);
    std::string text = fmt::format("{} TFLOP/s per rank mean (after step 1)", format_number(tflops.sum / tflops.n));
    if (mfu.n > 0) {
      text += fmt::format("; MFU {:.1f}%", 100.0 * mfu.sum / mfu.n);
      if (run.summary && !run.summary->peak_source.empty()) text += " of " + run.summary->peak_source;
    } else {
      text += "; no MFU (no peak given: cleave train --profile FILE)";
    }
    html += row("model FLOP/s", text);
  }
  if (run.summary && run.summary->model_flops_per_step > 0) {
    html += row("model FLOPs", fmt::format("{:.4g} per step (the cost model's forward and backward FLOPs of every "
                                           "block; recomputation not counted; docs/report.md)",
                                           run.summary->model_flops_per_step));
  }
  // Counts carried on from row to row: the last row's are the run's.
  const ColumnStats nonfinite = stats_of(m, "nonfinite_steps");
  if (nonfinite.n > 0) {
    const ColumnStats skipped = stats_of(m, "skipped_steps");
    html += row("non-finite steps", fmt::format("{:.0f} (skipped, no update applied: {:.0f})", nonfinite.last,
                                                skipped.n > 0 ? skipped.last : 0.0));
  }
  const ColumnStats peak = stats_of(m, "peak_bytes");
  if (peak.n > 0) html += row("peak memory", format_bytes(static_cast<std::int64_t>(peak.max)) + " (max over ranks)");
  if (run.summary) {
    for (const ResumeRecord& r : run.summary->resumes) {
      std::string changes;
      for (const ConfigChangeRecord& c : r.config_changes) {
        changes += fmt::format("{}{} {} -> {}{}", changes.empty() ? "" : ", ", c.key, c.before, c.after,
                               c.allowed_by == "resume" ? "" : " (" + c.allowed_by + ")");
      }
      html += row("resumed", fmt::format("at step {} from {}; config changes: {}", r.at_step, r.checkpoint,
                                         changes.empty() ? std::string("none") : changes));
    }
  }
  return html + "</table>\n";
}

// Whether any rank of the run has a cp (ep) coordinate: the labels and the layout table name only the axes it used.
bool has_cp(const RunSummary& s) {
  return std::any_of(s.ranks.begin(), s.ranks.end(), [](const RankSummary& r) { return r.cp_rank > 0; });
}
bool has_ep(const RunSummary& s) {
  return std::any_of(s.ranks.begin(), s.ranks.end(), [](const RankSummary& r) { return r.ep_rank > 0; });
}

// "pp 1, dp 0, cp 1, ep 1, tp 0": a rank's coordinates, cp and ep only where the run used them.
std::string rank_coordinates(const RunSummary& s, const RankSummary& r) {
  return fmt::format("pp {}, dp {}{}{}, tp {}", r.pp_rank, r.dp_rank,
                     has_cp(s) ? fmt::format(", cp {}", r.cp_rank) : std::string(),
                     has_ep(s) ? fmt::format(", ep {}", r.ep_rank) : std::string(), r.tp_rank);
}

std::string memory_section(const RunSummary& s) {
  std::string html;
  StackedBars bars;
  bars.title = "peak memory per rank by category";
  bars.segment_names = s.categories;
  for (std::size_t c = 0; c < s.categories.size(); ++c) bars.segment_colors.push_back(category_color(s.categories[c], c));
  bars.cap = static_cast<double>(s.memory_limit);
  bars.marker_name = "peak of the total";
  for (const RankSummary& r : s.ranks) {
    bars.bar_labels.push_back(fmt::format("rank {} ({})", r.rank, rank_coordinates(s, r)));
    std::vector<double> v;
    for (auto b : r.peak_bytes) v.push_back(static_cast<double>(b));
    bars.values.push_back(std::move(v));
    bars.markers.push_back(static_cast<double>(r.peak_total));
  }
  html += "<div class=\"charts\">" + stacked_bars_svg(bars) + "</div>\n";
  html += fmt::format(
      "<p>Each category's bar is that category's own peak during the run (they need not coincide); the marker is "
      "the peak of the total. Cap: {}. Estimates are the memory plan's (engine/run_plan/memory_plan.hpp).</p>\n",
      s.memory_limit > 0 ? format_bytes(s.memory_limit) : std::string("none (device.memory_limit unset)"));
  // The memory plan's host line (a GPU run's moe blocks): a column of its own where a rank has one, else none.
  const bool pinned = std::any_of(s.ranks.begin(), s.ranks.end(),
                                  [](const RankSummary& r) { return r.estimate_host_pinned_bytes > 0; });
  if (pinned) {
    html += "<p>Host pinned: the memory plan's page-locked host memory the rank's moe blocks stage their routing in "
            "(host memory, not in the total and not under the cap, but under the host's page-locked limit; an "
            "estimate only, not measured).</p>\n";
  }
  html += "<table>\n<tr><th class=\"l\">rank</th>";
  for (const auto& c : s.categories) html += fmt::format("<th>{}</th>", xml_escape(c));
  html += std::string("<th>peak total</th><th>of cap</th>") + (pinned ? "<th>host pinned</th>" : "") + "</tr>\n";
  for (const RankSummary& r : s.ranks) {
    html += fmt::format("<tr><td class=\"l\">{} measured</td>", r.rank);
    for (auto b : r.peak_bytes) html += fmt::format("<td>{}</td>", format_bytes(b));
    html += fmt::format("<td>{}</td><td>{}</td>{}</tr>\n", format_bytes(r.peak_total),
                        s.memory_limit > 0 ? fmt::format("{:.0f}%", 100.0 * static_cast<double>(r.peak_total) /
                                                                         static_cast<double>(s.memory_limit))
                                           : std::string("-"),
                        pinned ? "<td>-</td>" : "");
    if (r.estimate_bytes.size() == s.categories.size()) {
      std::int64_t total = 0;
      html += fmt::format("<tr><td class=\"l\">{} estimate</td>", r.rank);
      for (auto b : r.estimate_bytes) {
        html += fmt::format("<td>{}</td>", format_bytes(b));
        total += b;
      }
      if (r.estimate_total_bytes > 0) total = r.estimate_total_bytes;  // the plan's own total (the cap check's)
      html += fmt::format("<td>{}</td><td></td>{}</tr>\n", format_bytes(total),
                          pinned ? fmt::format("<td>{}</td>", format_bytes(r.estimate_host_pinned_bytes)) : "");
    }
  }
  return html + "</table>\n";
}

std::string layout_section(const RunSummary& s) {
  std::string html = "<table class=\"summary\">\n";
  html += row("grid", s.grid);
  html += row("schedule", s.schedule);
  html += row("partition", s.partition);
  html += row("model", s.model);
  html += row("batch", s.batch);
  if (!s.cpu.empty()) html += row("cpu (rank 0)", s.cpu);
  if (!s.cpu_kernels.empty()) html += row("cpu kernels", s.cpu_kernels);
  if (!s.cpu_gemm.description.empty()) html += row("cpu gemm", s.cpu_gemm.description);
  const bool cp = has_cp(s), ep = has_ep(s);
  html += fmt::format("</table>\n<p></p><table>\n<tr><th>world rank</th><th>tp rank</th>{}<th>dp rank</th>{}"
                      "<th>pp rank</th><th class=\"l\">stages held</th></tr>\n",
                      cp ? "<th>cp rank</th>" : "", ep ? "<th>ep rank</th>" : "");
  for (const RankSummary& r : s.ranks) {
    std::string stages;
    for (int st : r.stages) stages += fmt::format("{}{}", stages.empty() ? "" : ", ", st);
    html += fmt::format("<tr><td>{}</td><td>{}</td>{}<td>{}</td>{}<td>{}</td><td class=\"l\">{}</td></tr>\n", r.rank,
                        r.tp_rank, cp ? fmt::format("<td>{}</td>", r.cp_rank) : std::string(), r.dp_rank,
                        ep ? fmt::format("<td>{}</td>", r.ep_rank) : std::string(), r.pp_rank, stages);
  }
  return html + "</table>\n";
}

}  // namespace

std::string build_report_html(const RunFiles& run) {
  const MetricsTable& m = run.metrics;
  const std::string unit = run.summary ? run.summary->throughput_unit : std::string("items");
  std::string html = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  html += fmt::format("<title>Cleave run report: {}</title>\n<style>\n{}</style>\n</head>\n<body>\n",
                      xml_escape(run.dir), kStyle);
  html += fmt::format("<h1>Cleave run report: {}</h1>\n", xml_escape(run.dir));
  html += summary_table(run);

  html += "<h2>Curves</h2>\n<div class=\"charts\">\n";
  html += chart(m, "loss", "loss", {{"loss", "#1f77b4"}, {"eval_loss", "#d62728"}});
  html += chart(m, "learning rate", "lr", {{"lr", "#2ca02c"}}, false);
  html += chart(m, fmt::format("throughput ({}/s, all ranks)", unit), unit + "/s", {{"tokens_per_s", "#9467bd"}},
                false);
  html += chart(m, "step time (ms)", "ms", {{"step_ms", "#8c564b"}}, false);
  if (m.column("tflops_per_rank")) {  // runs before it was recorded have none
    html += chart(m, "achieved model TFLOP/s per rank", "TFLOP/s", {{"tflops_per_rank", "#bcbd22"}}, false);
  }
  if (m.column("mfu")) html += chart(m, "MFU (fraction of the peak)", "MFU", {{"mfu", "#e377c2"}}, false);
  html += chart(m, "gradient norm (before clipping)", "norm", {{"grad_norm", "#ff7f0e"}}, false);
  if (m.column("eval_accuracy")) html += chart(m, "eval accuracy", "accuracy", {{"eval_accuracy", "#17becf"}});
  html += "</div>\n";
  if (m.column("moe_aux_loss")) html += expert_load_section(m);

  html += "<h2>Memory</h2>\n";
  if (run.summary) {
    html += memory_section(*run.summary);
  } else {
    html += "<p class=\"note\">No run.json in the run directory (a run that stopped before its end, or one written "
            "before per-rank figures were recorded): per-rank memory by category is not available. The curve below "
            "is metrics.jsonl's peak_bytes, the maximum over ranks.</p>\n";
  }
  html += "<div class=\"charts\">" + chart(m, "peak memory so far (max over ranks, bytes)", "bytes",
                                           {{"peak_bytes", "#7f7f7f"}}, false) + "</div>\n";

  html += "<h2>Layout</h2>\n";
  html += run.summary ? layout_section(*run.summary) : std::string("<p class=\"note\">not recorded (no run.json)</p>\n");
  html += "<h2>Resolved config</h2>\n";
  html += run.config_text.empty() ? std::string("<p class=\"note\">no config.json in the run directory</p>\n")
                                  : "<pre>" + xml_escape(run.config_text) + "</pre>\n";
  html += "<p class=\"note\">Written by cleave from metrics.jsonl, run.json and config.json; regenerate with "
          "<code>cleave report RUN_DIR</code>.</p>\n</body>\n</html>\n";
  return html;
}

std::string write_report(const std::string& dir) {
  const std::filesystem::path path = std::filesystem::path(dir) / "report.html";
  const std::string tmp = path.string() + ".tmp";
  // A report.html that is a directory (or another non-file) would be found only at the final rename, leaving the
  // temporary file behind: refused first, as bad input naming it.
  std::error_code exists_ec;
  CLEAVE_CHECK_INPUT(!std::filesystem::exists(path, exists_ec) || std::filesystem::is_regular_file(path, exists_ec),
                     "report: {} exists and is not a regular file; nothing was written (remove it: the report is "
                     "written there)", path.string());
  const RunFiles run = read_run_dir(dir);
  const std::string html = build_report_html(run);
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  CLEAVE_CHECK(f != nullptr, "report: cannot create {} ({})", tmp, std::strerror(errno));
  const bool written = std::fwrite(html.data(), 1, html.size(), f) == html.size();
  const int write_errno = errno;
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    const int code = written ? errno : write_errno;
    std::remove(tmp.c_str());
    CLEAVE_THROW("report: writing {} failed ({}); no report written", path.string(), std::strerror(code));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::remove(tmp.c_str());
  CLEAVE_CHECK(!ec, "report: cannot rename {} to {} ({}); no report written", tmp, path.string(), ec.message());
  return path.string();
}

}  // namespace cleave::report

// metrics.jsonl lines, the progress line format (plain and live), the summary, and the output-directory
// guard (an existing run is refused and left untouched).
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/train/metrics.hpp"

namespace cleave::train::metrics_test {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("cleave_metrics_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string read_stream(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, f)) > 0;) out.append(buffer, n);
  return out;
}

StepMetrics sample_metrics(std::int64_t step) {
  StepMetrics m;
  m.step = step;
  m.loss = 2.3412 + 0.01 * step;
  m.lr = 3e-4;
  m.grad_norm = 0.75;
  m.tokens_per_s = 12345;
  m.flops_per_rank = 1.52e12;
  m.step_ms = 84.12;
  m.peak_bytes = static_cast<std::int64_t>(123.4 * 1024 * 1024);
  return m;
}

TEST(OutDir, CreatesAndRefusesAnExistingRun) {
  const fs::path root = temp_dir("outdir");
  const std::string run = (root / "a" / "b").string();
  prepare_out_dir(run);
  EXPECT_TRUE(fs::is_directory(run));
  prepare_out_dir(run);  // an empty directory is fine
  for (const char* marker : {"metrics.jsonl", "config.json"}) {
    fs::remove_all(run);
    fs::create_directories(run);
    std::ofstream(fs::path(run) / marker) << "old run";
    try {
      prepare_out_dir(run);
      ADD_FAILURE() << "no error for " << marker;
    } catch (const InputError& e) {  // bad input: exit 64
      const std::string message = e.what();
      EXPECT_NE(message.find(run), std::string::npos) << message;
      EXPECT_NE(message.find(marker), std::string::npos) << message;
      EXPECT_NE(message.find("--set train.out_dir=" + run + "-2"), std::string::npos) << message;
    }
    EXPECT_EQ(read_file(fs::path(run) / marker), "old run");
    EXPECT_EQ(std::distance(fs::directory_iterator(run), fs::directory_iterator()), 1);
  }
  const std::string file = (root / "file").string();
  std::ofstream(file) << "x";
  // The user's path is what is wrong (bad input, exit 64), before anything is created: a file, a path under a
  // file, an empty key.
  EXPECT_THROW(prepare_out_dir(file), InputError);
  EXPECT_THROW(prepare_out_dir((fs::path(file) / "run").string()), InputError);
  EXPECT_THROW(prepare_out_dir(""), InputError);
  EXPECT_EQ(read_file(file), "x");
  fs::remove_all(root);
}

// A resumed run at step 2: rows after step 2 are dropped, then the writer appends step 3 after them.
TEST(MetricsWriter, ResumeKeepsRowsThroughTheStepAndAppends) {
  const fs::path root = temp_dir("resume");
  fs::create_directories(root);
  const fs::path path = root / "metrics.jsonl";
  {
    MetricsWriter writer(path.string());
    for (int step = 1; step <= 4; ++step) {
      StepMetrics m = sample_metrics(step);
      m.nonfinite_steps = step >= 2 ? step - 1 : 0;  // steps 2, 3, 4 were not finite
      m.skipped_steps = step >= 2 ? 1 : 0;
      writer.write(m);
    }
  }
  // The counts of the last kept row carry on: 1 non-finite step, 1 skipped, by step 2.
  const StepCounts counts = keep_metrics_through(path.string(), 2);
  EXPECT_EQ(counts.nonfinite_steps, 1);
  EXPECT_EQ(counts.skipped_steps, 1);
  {
    MetricsWriter writer(path.string(), /*append=*/true);
    writer.write(sample_metrics(3));
  }
  std::istringstream in(read_file(path));
  std::vector<int> steps;
  for (std::string line; std::getline(in, line);) steps.push_back(nlohmann::json::parse(line)["step"].get<int>());
  EXPECT_EQ(steps, (std::vector<int>{1, 2, 3}));
  keep_metrics_through((root / "absent.jsonl").string(), 2);  // nothing to keep: nothing created
  EXPECT_FALSE(fs::exists(root / "absent.jsonl"));
  fs::remove_all(root);
}

// A crash mid-row leaves a last line without its newline: the resume drops it and keeps the rows before it. A
// damaged row elsewhere is refused naming the file, the line and the fix, and the file is left as it was.
TEST(MetricsWriter, ResumeDropsALastRowCutShortAndRefusesADamagedOne) {
  const fs::path root = temp_dir("cut");
  fs::create_directories(root);
  const fs::path path = root / "metrics.jsonl";
  {
    MetricsWriter writer(path.string());
    for (int step = 1; step <= 3; ++step) writer.write(sample_metrics(step));
  }
  const std::string whole = read_file(path);
  {
    std::ofstream(path, std::ios::app) << "{\"step\": 4, \"lo";  // cut short, no newline
  }
  EXPECT_NO_THROW(keep_metrics_through(path.string(), 3));
  EXPECT_EQ(read_file(path), whole);
  // The same bytes with a newline are a damaged row, not a cut-short one.
  {
    std::ofstream(path, std::ios::app) << "garbage\n";
  }
  const std::string damaged = read_file(path);
  try {
    keep_metrics_through(path.string(), 3);
    ADD_FAILURE() << "a damaged row was accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path.string() + ": line 4 does not parse"), std::string::npos) << message;
    EXPECT_NE(message.find("delete that line"), std::string::npos) << message;
  }
  EXPECT_EQ(read_file(path), damaged);
  fs::remove_all(root);
}

TEST(MetricsWriter, OneFlushedJsonObjectPerStep) {
  const fs::path root = temp_dir("writer");
  fs::create_directories(root);
  const fs::path path = root / "metrics.jsonl";
  MetricsWriter writer(path.string());
  StepMetrics m = sample_metrics(1);
  m.extra = {{"eval_loss", 1.25}, {"clip_scale", 0.5}};
  m.counts = {{"resumed_at_step", 4}};
  writer.write(m);
  // Flushed: visible while the writer is alive.
  auto lines = read_file(path);
  EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 1);
  StepMetrics bad = sample_metrics(2);
  bad.loss = std::nan("");
  bad.grad_norm = INFINITY;
  bad.mfu = 0.25;
  bad.nonfinite_steps = 1;
  bad.skipped_steps = 1;
  writer.write(bad);
  lines = read_file(path);
  std::istringstream in(lines);
  std::string line;
  std::getline(in, line);
  const auto first = nlohmann::json::parse(line);
  EXPECT_EQ(first["step"], 1);
  EXPECT_DOUBLE_EQ(first["loss"].get<double>(), m.loss);
  EXPECT_DOUBLE_EQ(first["lr"].get<double>(), 3e-4);
  EXPECT_DOUBLE_EQ(first["grad_norm"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(first["tokens_per_s"].get<double>(), 12345);
  EXPECT_DOUBLE_EQ(first["step_ms"].get<double>(), 84.12);
  EXPECT_EQ(first["peak_bytes"], m.peak_bytes);
  EXPECT_DOUBLE_EQ(first["tflops_per_rank"].get<double>(), 1.52);
  EXPECT_FALSE(first.contains("mfu"));  // no peak: no field
  EXPECT_TRUE(first["nonfinite_steps"].is_number_integer());
  EXPECT_TRUE(first["skipped_steps"].is_number_integer());
  EXPECT_TRUE(first["resumed_at_step"].is_number_integer());  // never 4.0
  EXPECT_EQ(first["resumed_at_step"], 4);
  EXPECT_DOUBLE_EQ(first["eval_loss"].get<double>(), 1.25);
  std::getline(in, line);
  const auto second = nlohmann::json::parse(line);
  EXPECT_TRUE(second["loss"].is_null());
  EXPECT_TRUE(second["grad_norm"].is_null());
  EXPECT_EQ(second["step"], 2);
  EXPECT_DOUBLE_EQ(second["mfu"].get<double>(), 0.25);
  EXPECT_EQ(second["nonfinite_steps"], 1);
  EXPECT_EQ(second["skipped_steps"], 1);
  fs::remove_all(root);
  EXPECT_THROW(MetricsWriter((root / "no" / "such" / "dir" / "m.jsonl").string()), Error);
}

TEST(Progress, LineFormat) {
  ProgressPrinter printer(500, 10, "tok", stdout, false);
  StepMetrics m = sample_metrics(120);
  m.loss = 2.3412;
  EXPECT_EQ(printer.format_line(m), "step 120/500 | loss 2.3412 | lr 3.0e-04 | gnorm 0.75 | 12.3k tok/s | "
                                    "1.52 TFLOP/s/rank | 84.1 ms/step | peak 123.4 MiB");
  m.step = 7;
  m.tokens_per_s = 2.5e6;
  m.peak_bytes = 3LL << 30;
  m.grad_norm = 1234.5;
  m.flops_per_rank = 3.125e9;
  m.mfu = 0.4134;
  EXPECT_EQ(printer.format_line(m), "step   7/500 | loss 2.3412 | lr 3.0e-04 | gnorm 1.23e+03 | 2.50M tok/s | "
                                    "3.1 GFLOP/s/rank | MFU 41.3% | 84.1 ms/step | peak 3.00 GiB");
  // Non-finite steps appear once there is one.
  m.nonfinite_steps = 2;
  m.skipped_steps = 1;
  m.grad_norm = std::nan("");
  EXPECT_TRUE(printer.format_line(m).ends_with("| gnorm nan | 2.50M tok/s | 3.1 GFLOP/s/rank | MFU 41.3% | 84.1 "
                                               "ms/step | peak 3.00 GiB | non-finite 2 (skipped 1)"))
      << printer.format_line(m);
  EXPECT_EQ(format_rate(950), "950.0");
  EXPECT_EQ(format_memory(2048), "2.0 KiB");
  EXPECT_EQ(format_flops(85e6), "85.0 MFLOP/s");
  EXPECT_EQ(format_flops(std::nan("")), "-");
}

TEST(Progress, PlainLinesAtIntervalsAndSummary) {
  std::FILE* out = std::tmpfile();
  ProgressPrinter printer(25, 10, "samples", out, false);
  for (int step = 1; step <= 25; ++step) printer.update(sample_metrics(step));
  printer.eval(25, 1.5, 0.931);
  printer.summary("outputs in runs/x");
  const std::string text = read_stream(out);
  std::fclose(out);
  EXPECT_EQ(text.find('\r'), std::string::npos);
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 6u) << text;
  EXPECT_TRUE(lines[0].starts_with("step  1/25 |")) << lines[0];
  EXPECT_TRUE(lines[1].starts_with("step 10/25 |")) << lines[1];
  EXPECT_TRUE(lines[2].starts_with("step 20/25 |")) << lines[2];
  EXPECT_TRUE(lines[3].starts_with("step 25/25 |")) << lines[3];
  EXPECT_NE(lines[0].find("samples/s"), std::string::npos);
  EXPECT_EQ(lines[4], "eval step 25/25 | loss 1.5000 | accuracy 93.1%");
  // 25 steps of 84.12 ms = 2.1 s; loss 2.3512 -> 2.5912, min = first; 12.3k samples/s.
  EXPECT_EQ(lines[5], "done: 25 steps in 2.1 s | loss 2.3512 -> 2.5912 (min 2.3512) | 12.3k samples/s | "
                      "1.52 TFLOP/s/rank | peak 123.4 MiB | non-finite 0 (skipped 0) | outputs in runs/x");
}

// The summary's rate is the total over the total time, and its MFU that rate over the peak the steps had.
TEST(Progress, SummaryFlopsMfuAndCounts) {
  std::FILE* out = std::tmpfile();
  ProgressPrinter printer(2, 1, "tok", out, false);
  StepMetrics a = sample_metrics(1);
  a.step_ms = 100;
  a.flops_per_rank = 1e12;
  a.mfu = 0.5;  // a peak of 2 TFLOP/s
  StepMetrics b = sample_metrics(2);
  b.step_ms = 300;
  b.flops_per_rank = 3e12;
  b.mfu = 1.5;
  b.nonfinite_steps = 1;
  b.skipped_steps = 1;
  printer.update(a);
  printer.update(b);
  printer.summary();
  const std::string text = read_stream(out);
  std::fclose(out);
  // (0.1 s x 1 + 0.3 s x 3) TFLOP / 0.4 s = 2.5 TFLOP/s; MFU 2.5 / 2 = 125% (3 significant digits).
  EXPECT_NE(text.find("| 2.50 TFLOP/s/rank (MFU 125%) | peak 123.4 MiB | non-finite 1 (skipped 1)"),
            std::string::npos)
      << text;
}

// A non-finite step is shown when it happens, between log intervals too.
TEST(Progress, NonFiniteStepsArePrintedAtOnce) {
  std::FILE* out = std::tmpfile();
  ProgressPrinter printer(30, 10, "tok", out, false);
  for (int step = 1; step <= 12; ++step) {
    StepMetrics m = sample_metrics(step);
    m.nonfinite_steps = step >= 4 ? 1 : 0;  // step 4 only
    m.skipped_steps = m.nonfinite_steps;
    printer.update(m);
  }
  const std::string text = read_stream(out);
  std::fclose(out);
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u) << text;  // steps 1, 4 and 10
  EXPECT_TRUE(lines[1].starts_with("step  4/30 |")) << lines[1];
  EXPECT_TRUE(lines[1].ends_with("| non-finite 1 (skipped 1)")) << lines[1];
  EXPECT_TRUE(lines[2].starts_with("step 10/30 |")) << lines[2];
}

// A resumed run counts only the steps it ran (it said "done: 25 steps" after running 5).
TEST(Progress, SummaryAfterAResumeCountsThisProcessesSteps) {
  std::FILE* out = std::tmpfile();
  ProgressPrinter printer(25, 10, "samples", out, false);
  for (int step = 21; step <= 25; ++step) printer.update(sample_metrics(step));
  printer.summary();
  const std::string text = read_stream(out);
  std::fclose(out);
  EXPECT_NE(text.find("done: 5 steps (21 to 25, resumed at step 20) in 0.4 s | loss"), std::string::npos) << text;
}

TEST(Progress, LiveBarOnTerminals) {
  std::FILE* out = std::tmpfile();
  ProgressPrinter printer(4, 2, "tok", out, true);
  for (int step = 1; step <= 4; ++step) printer.update(sample_metrics(step));
  printer.eval(4, 1.5);  // starts on a fresh line: the last step closes the bar
  const std::string text = read_stream(out);
  std::fclose(out);
  // Steps 1, 2 and 4 print a kept line; steps 1, 2 and 3 redraw the bar after it (not after the last step).
  EXPECT_EQ(std::count(text.begin(), text.end(), '\r'), 3 + 3 + 1);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 3 + 1);
  EXPECT_NE(text.find("[#####...............]  25% 1/4 |"), std::string::npos) << text;
  EXPECT_NE(text.find("[###############.....]  75% 3/4 |"), std::string::npos) << text;
  EXPECT_NE(text.find("| ETA "), std::string::npos);
  // The bar never ends a line: everything after the last bar is the next kept line.
  EXPECT_NE(text.find("\x1b[K\rstep 4/4"), std::string::npos) << text;
}

TEST(Progress, LiveLineEtaAndDurations) {
  ProgressPrinter printer(500, 10, "tok", stderr, false);
  StepMetrics m = sample_metrics(120);
  // 100 steps of this run in 50 s: 0.5 s a step, 380 to go = 190 s.
  EXPECT_EQ(printer.format_live_line(m, 100, 50.0),
            "[####................]  24% 120/500 | loss 3.5412 | 12.3k tok/s | ETA 3m10s");
  EXPECT_NE(printer.format_live_line(m, 0, 0.0).find("ETA -"), std::string::npos);
  EXPECT_EQ(format_duration(42.4), "42s");
  EXPECT_EQ(format_duration(62), "1m02s");
  EXPECT_EQ(format_duration(7530), "2h05m");
  EXPECT_EQ(format_duration(-1), "-");
}

TEST(Progress, InterruptEndsAnOpenBar) {
  std::FILE* out = std::tmpfile();
  ProgressPrinter printer(10, 5, "tok", out, true);
  printer.update(sample_metrics(2));  // bar only (not a log step)
  printer.interrupt();
  printer.interrupt();  // nothing open: no second newline
  const std::string text = read_stream(out);
  std::fclose(out);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1);
  EXPECT_TRUE(text.ends_with("\n"));
}

TEST(MetricsWriter, FailedWriteNamesFileAndStep) {
  MetricsWriter writer("/dev/full");
  try {
    writer.write(sample_metrics(7));
    FAIL() << "writing to /dev/full succeeded";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("metrics file /dev/full: writing the row of step 7 failed (No space left on device)"),
              std::string::npos) << what;
    EXPECT_NE(what.find("the 6 rows before it are intact"), std::string::npos) << what;
  }
  EXPECT_THROW(writer.write(sample_metrics(8)), Error);  // a failed writer stays failed
  EXPECT_THROW(write_text_file("/dev/full", std::string(100, 'x')), Error);
}

}  // namespace
}  // namespace cleave::train::metrics_test

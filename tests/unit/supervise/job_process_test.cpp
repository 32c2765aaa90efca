// The supervised job's process group (engine/supervise/job_process.hpp): output reaches the caller and the log,
// the exit code is the child's (128 + signal for a death on one), and end_group leaves no process of the group
// alive, a stopped one included (the SIGSTOP drill's leftover).
#include <gtest/gtest.h>

#include <signal.h>

#include <filesystem>
#include <fstream>

#include "engine/supervise/job_process.hpp"

namespace cleave::supervise::job_process_test {
namespace {

TEST(JobProcess, OutputLogAndExitCode) {
  const auto log = std::filesystem::temp_directory_path() / "cleave_job_process_test.log";
  JobSpec spec;
  spec.argv = {"sh", "-c", "echo \"out $CLEAVE_JOB_TEST\"; echo err >&2; exit 3"};
  spec.set_env = {{"CLEAVE_JOB_TEST", "seen"}};
  spec.log_path = log.string();
  {
    JobProcess job(spec);
    while (!job.exited()) job.poll(50);
    while (!job.poll(0).empty()) {}
    EXPECT_EQ(job.exit_code(), 3);
    EXPECT_NE(job.output().find("out seen"), std::string::npos) << job.output();
    EXPECT_NE(job.output().find("err"), std::string::npos);
  }
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("out seen"), std::string::npos);
  std::filesystem::remove(log);
}

TEST(JobProcess, EndGroupKillsEveryProcessStoppedOnesToo) {
  JobSpec spec;
  // A launcher with two children, one of them stopped, that never ends by itself.
  spec.argv = {"sh", "-c", "sleep 600 & sleep 600 & kill -STOP $!; echo ready; wait"};
  JobProcess job(spec);
  while (job.output().find("ready") == std::string::npos && !job.exited()) job.poll(50);
  ASSERT_TRUE(job.group_alive());
  job.end_group(500);
  EXPECT_TRUE(job.exited());
  EXPECT_FALSE(job.group_alive());
  EXPECT_GE(job.exit_code(), 128);  // ended by a signal
}

TEST(JobProcess, SignalDeathIsReportedAs128PlusSignal) {
  JobSpec spec;
  spec.argv = {"sh", "-c", "kill -KILL $$"};
  JobProcess job(spec);
  while (!job.exited()) job.poll(50);
  EXPECT_EQ(job.exit_code(), 128 + SIGKILL);
}

}  // namespace
}  // namespace cleave::supervise::job_process_test

// The supervisor's decisions (engine/supervise/recovery_policy.hpp) on the launcher's and ranks' real lines:
// which rank failed and why, which slots are left, whether to restart, the --keep-layout layout (the global batch
// kept), the smallest world that fits, and the checkpoint interval from --max-lost-seconds. Plus the records'
// arithmetic (restart_record.hpp): steps redone, seconds lost, run.json merge keeping the trainer's keys.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "engine/checkpoint/checkpoint_damage.hpp"
#include "engine/core/error.hpp"
#include "engine/core/exit_code.hpp"
#include "engine/core/input_error.hpp"
#include "engine/supervise/recovery_policy.hpp"
#include "engine/supervise/restart_record.hpp"

namespace cleave::supervise::recovery_policy_test {
namespace {

TEST(ClassifyFailure, OpenMpiKilledRankIsNamed) {
  const std::string out =
      "[rank 3] fault injection (CLEAVE_FAULT_INJECT): step 4, stage 1 forward of micro-batch 1: rank 3 SIGKILLs itself\n"
      "[rank 0/4] terminated by SIGTERM (the launcher is ending the job; another rank failed?) while waiting\n"
      "mpirun noticed that process rank 3 with PID 4242 on node box exited on signal 9 (Killed).\n";
  const Failure f = classify_failure(out, 137);
  EXPECT_EQ(f.kind, FailureKind::kKilled);
  EXPECT_EQ(f.ranks, std::vector<int>{3});
  EXPECT_EQ(f.why, "rank 3 exited on signal 9 (Killed)");
}

TEST(ClassifyFailure, WatchdogHangOutranksTheAbortAndNamesEverySilentRank) {
  const std::string out =
      "[rank 0/4] comm timeout after 2.0s in all_reduce (group 'world/dp' = world ranks [0,1]; pending: rank 1)\n"
      "[rank 0/4] not answering within 1.0s: rank 1, rank 3 (stopped, dead, or busy outside communication); aborting\n"
      "MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD with errorcode 3.\n"
      "mpirun noticed that process rank 2 with PID 11 on node box exited on signal 15 (Terminated).\n";
  const Failure f = classify_failure(out, 3);
  EXPECT_EQ(f.kind, FailureKind::kHung);
  EXPECT_EQ(f.ranks, (std::vector<int>{1, 3}));
  EXPECT_NE(f.why.find("rank 1, rank 3"), std::string::npos) << f.why;
}

TEST(ClassifyFailure, ErrorLineSrunAndUnknown) {
  const Failure e = classify_failure("[rank 2/4] error: injected fault (CLEAVE_FAULT_INJECT) in step 3\n", 1);
  EXPECT_EQ(e.kind, FailureKind::kError);
  EXPECT_EQ(e.ranks, std::vector<int>{2});
  const Failure s = classify_failure("srun: error: node1: task 1: Killed\nsrun: error: node1: task 0: Terminated\n", 137);
  EXPECT_EQ(s.kind, FailureKind::kKilled);
  EXPECT_EQ(s.ranks, std::vector<int>{1});
  const Failure u = classify_failure("something else\n", 2);
  EXPECT_EQ(u.kind, FailureKind::kUnknown);
  EXPECT_TRUE(u.ranks.empty());
  EXPECT_NE(u.why.find("code 2"), std::string::npos);
}

// Open MPI's refusal to start as root (no rank ran): bad input of the launcher, no restart; it was "unknown", so
// cleave run restarted into it until the budget was spent. Any other unknown failure quotes the output's last line.
TEST(ClassifyFailure, LauncherRefusingRootIsNotRestartedAndUnknownQuotesTheLastLine) {
  const std::string out =
      "--------------------------------------------------------------------------\n"
      "mpiexec has detected an attempt to run as root.\n\n"
      "Running as root is *strongly* discouraged as any mistake (e.g., in\n"
      "We reiterate our advice against doing so - please proceed at your own risk.\n"
      "--------------------------------------------------------------------------\n";
  const Failure f = classify_failure(out, 1);
  EXPECT_EQ(f.kind, FailureKind::kBadInput);
  EXPECT_FALSE(restart_can_cure(f.kind));
  EXPECT_NE(f.why.find("mpiexec refuses to run as root, so no rank started: add --allow-run-as-root to --launcher"),
            std::string::npos) << f.why;
  const Failure u = classify_failure("prterun: cannot reach host node7\n-----\n", 1);
  EXPECT_EQ(u.kind, FailureKind::kUnknown);
  EXPECT_EQ(u.why, "the job exited with code 1 and no line names a rank; its last line: \"prterun: cannot reach host node7\"");
}

TEST(ClassifyFailure, NoIntactCheckpointExitCodeIsItsOwnKindWithTheWholeLineAndNoRestart) {
  // Every rank agreed (rank 0 prints the line once, no rank prefix); the line lists each checkpoint, past 200 chars.
  std::string line = "--resume auto: no intact checkpoint under run/checkpoints: step_0000004 (step 4): checkpoint file "
                     "run/checkpoints/step_0000004/rank_00000.safetensors: bytes [0, 32768) of tensor embed.token "
                     "(embed.token) fail their checksum; step_0000002 (step 2): checkpoint file run/checkpoints/"
                     "step_0000002/rank_00001.safetensors is missing; nothing was loaded, renamed or written";
  ASSERT_GT(line.size(), 200u);
  const std::string out = "checkpoint: loading\nerror: " + line + "\n-----\nPrimary job  terminated normally, but 1 "
                          "process returned\na non-zero exit code.\n";
  const Failure f = classify_failure(out, exit_status(ExitCode::kNoIntactCheckpoint));
  EXPECT_EQ(f.kind, FailureKind::kNoIntactCheckpoint);
  EXPECT_EQ(f.why, line);
  EXPECT_TRUE(f.ranks.empty());
  EXPECT_EQ(failure_kind_name(f.kind), "no intact checkpoint");
  EXPECT_FALSE(restart_can_cure(f.kind));
  // One rank's line (the ranks disagreed), and no line at all: still the exit code's kind.
  const Failure r = classify_failure("[rank 1/2] error: " + line + "\n", exit_status(ExitCode::kNoIntactCheckpoint));
  EXPECT_EQ(r.kind, FailureKind::kNoIntactCheckpoint);
  EXPECT_EQ(r.ranks, std::vector<int>{1});
  EXPECT_EQ(r.why, line);
  EXPECT_EQ(classify_failure("", exit_status(ExitCode::kNoIntactCheckpoint)).kind, FailureKind::kNoIntactCheckpoint);
  // The same line with another exit code is an ordinary error; every other kind is worth a restart.
  EXPECT_EQ(classify_failure("[rank 1/2] error: " + line + "\n", 1).kind, FailureKind::kError);
  for (const FailureKind k : {FailureKind::kKilled, FailureKind::kHung, FailureKind::kError, FailureKind::kUnknown}) {
    EXPECT_TRUE(restart_can_cure(k)) << failure_kind_name(k);
  }
}

TEST(ClassifyFailure, CheckpointMismatchExitCodeIsItsOwnKindWithTheWholeLineAndNoRestart) {
  // A config change --resume refuses: every rank refused it (rank 0's line, prefixed by the collective check).
  const std::string line = "rank 0: --resume run/checkpoints/step_0000004: the config differs from the one the "
                           "checkpoint was trained with: optimizer.lr 0.003 -> 0.001; a resumed run keeps these unless "
                           "you allow the change with --allow-config-change optimizer.lr (it is then recorded in "
                           "run.json and metrics.jsonl), or set them back: --set optimizer.lr=0.003";
  const Failure f =
      classify_failure("resume: loading\nerror: " + line + "\n", exit_status(ExitCode::kCheckpointMismatch));
  EXPECT_EQ(f.kind, FailureKind::kCheckpointMismatch);
  EXPECT_EQ(f.why, line);
  EXPECT_EQ(failure_kind_name(f.kind), "checkpoint mismatch");
  EXPECT_FALSE(restart_can_cure(f.kind));
  EXPECT_EQ(classify_failure("", exit_status(ExitCode::kCheckpointMismatch)).kind, FailureKind::kCheckpointMismatch);
  // The kind comes from the exit code only, never the text: the same line with exit 1 is an ordinary error.
  EXPECT_EQ(classify_failure("[rank 0/2] error: " + line + "\n", 1).kind, FailureKind::kError);
  EXPECT_TRUE(restart_can_cure(classify_failure("[rank 0/2] error: " + line + "\n", 1).kind));
}

TEST(ClassifyFailure, BadInputExitCodeIsItsOwnKindWithTheWholeLineAndNoRestart) {
  // A typo in --allow-config-change (the trainer's check before any work), as cleave train prints it.
  const std::string line = "--allow-config-change: 'optimizer.lrr' is not a config key (did you mean optimizer.lr?)";
  const Failure f = classify_failure("error: " + line + "\n", exit_status(ExitCode::kBadInput));
  EXPECT_EQ(f.kind, FailureKind::kBadInput);
  EXPECT_EQ(f.why, line);
  EXPECT_EQ(failure_kind_name(f.kind), "bad input");
  EXPECT_FALSE(restart_can_cure(f.kind));
  EXPECT_EQ(classify_failure("", exit_status(ExitCode::kBadInput)).kind, FailureKind::kBadInput);
  // An unknown --set key on one rank's line under mpirun: the same kind, its rank named.
  const Failure r = classify_failure("[rank 0/2] error: --set optimizer.lrr=1: unknown key optimizer.lrr (did you "
                                     "mean optimizer.lr?)\n", exit_status(ExitCode::kBadInput));
  EXPECT_EQ(r.kind, FailureKind::kBadInput);
  EXPECT_EQ(r.ranks, std::vector<int>{0});
  // The kind comes from the exit code only: the same line with exit 1 is an ordinary error, worth a restart.
  EXPECT_EQ(classify_failure("error: " + line + "\n", 1).kind, FailureKind::kUnknown);
  EXPECT_TRUE(restart_can_cure(classify_failure("error: " + line + "\n", 1).kind));
  EXPECT_EQ(exit_status(ExitCode::kBadInput), 64);  // BSD sysexits.h EX_USAGE
}

TEST(GiveUpExitStatus, PassesTheTrainersCodeOnForEachKindNoRestartCures) {
  // cleave run giving up at once exits as the job did: a script reads bad input as 64 from either command.
  EXPECT_EQ(give_up_exit_status(classify_failure("error: x\n", exit_status(ExitCode::kBadInput)).kind), 64);
  EXPECT_EQ(give_up_exit_status(FailureKind::kNoIntactCheckpoint), 66);
  EXPECT_EQ(give_up_exit_status(FailureKind::kCheckpointMismatch), 78);
  // The launcher refusing root is bad input too (the --launcher is wrong): 64.
  EXPECT_EQ(give_up_exit_status(classify_failure("mpirun has detected an attempt to run as root\n", 1).kind), 64);
  for (FailureKind k : {FailureKind::kKilled, FailureKind::kHung, FailureKind::kError, FailureKind::kUnknown}) {
    EXPECT_EQ(give_up_exit_status(k), 1);
  }
}

TEST(ExitCodeOf, EachErrorTypeHasItsOwnCode) {
  EXPECT_EQ(checkpoint::exit_code_of(checkpoint::NoIntactCheckpoint("x")), 66);
  EXPECT_EQ(checkpoint::exit_code_of(checkpoint::CheckpointMismatch("x")), 78);
  EXPECT_EQ(checkpoint::exit_code_of(InputError("x")), 64);
  EXPECT_EQ(checkpoint::exit_code_of(ConfigKeyError("model.d_model", "x")), 1);  // a later check on a config value
  EXPECT_EQ(checkpoint::exit_code_of(checkpoint::CheckpointDamage("x")), 1);  // --resume auto falls back on it
  EXPECT_EQ(checkpoint::exit_code_of(Error("x")), 1);
  EXPECT_EQ(checkpoint::exit_code_of(std::runtime_error("x")), 1);
}

// cleave run inside a SLURM allocation takes its slots from SLURM_NTASKS: a malformed value is bad input (exit 64)
// naming the variable, the value and the fix, never atoi's 0 or its prefix.
TEST(SlurmSlots, ParsesAPositiveTaskCountAndRefusesAnythingElse) {
  EXPECT_EQ(slurm_slots("3"), local_slots(3));
  EXPECT_EQ(slurm_slots("1").size(), 1u);
  for (const std::string bad : {"", "abc", "4x", "4(x2)", " 4", "+4", "-2", "0", "2.5", "99999999999"}) {
    try {
      slurm_slots(bad);
      ADD_FAILURE() << "SLURM_NTASKS='" << bad << "' accepted";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("SLURM_NTASKS='" + bad + "'"), std::string::npos) << what;
      EXPECT_NE(what.find("--slots N"), std::string::npos) << what;
      EXPECT_EQ(checkpoint::exit_code_of(e), 64);
    }
  }
}

TEST(RemainingSlots, DropsDeadAndHungRanksAndUnhealthySlotsOnly) {
  const auto slots = local_slots(4);
  EXPECT_EQ(remaining_slots(slots, {FailureKind::kKilled, {2}, ""}, {}),
            (std::vector<Slot>{{"localhost", 0}, {"localhost", 1}, {"localhost", 3}}));
  EXPECT_EQ(remaining_slots(slots, {FailureKind::kError, {2}, ""}, {}).size(), 4u);  // software fault: slots stay
  EXPECT_EQ(remaining_slots(slots, {FailureKind::kHung, {0, 3}, ""}, {true, false, true, true}),
            (std::vector<Slot>{{"localhost", 2}}));
}

TEST(Hostfile, ParsesSlotsAndWritesThemBack) {
  const auto slots = parse_hostfile("# nodes\nnodeA slots=2\nnodeB\n\nnodeA slots=1 max_slots=4\n", "hosts");
  ASSERT_EQ(slots.size(), 4u);
  EXPECT_EQ(slots[2], (Slot{"nodeB", 0}));
  EXPECT_EQ(slots[3], (Slot{"nodeA", 2}));
  EXPECT_EQ(hostfile_text(slots), "nodeA slots=3\nnodeB slots=1\n");
  EXPECT_THROW(parse_hostfile("nodeA slots=x\n", "hosts"), Error);
  EXPECT_THROW(parse_hostfile("nodeA cpus=2\n", "hosts"), Error);
  EXPECT_THROW(parse_hostfile("# empty\n", "hosts"), Error);
}

TEST(DecideRestart, BudgetThenMinRanks) {
  EXPECT_TRUE(decide_restart(0, 3, 3, 2).restart);
  const auto spent = decide_restart(3, 3, 3, 2);
  EXPECT_FALSE(spent.restart);
  EXPECT_NE(spent.reason.find("--max-restarts 3"), std::string::npos);
  const auto few = decide_restart(1, 3, 2, 3);
  EXPECT_FALSE(few.restart);
  EXPECT_EQ(few.reason, "2 ranks left, fewer than --min-ranks 3");
  EXPECT_FALSE(decide_restart(0, 0, 4, 1).restart);  // --max-restarts 0: never restart
}

planner::PlanChoice dp2_pp2() {
  planner::PlanChoice c;
  c.tp = 1, c.pp = 2, c.dp = 2, c.micro_batch = 2, c.global_batch = 8, c.schedule = "1f1b", c.zero_stage = 1;
  return c;
}

TEST(KeepLayout, ShrinksDpKeepsTpPpAndTheGlobalBatch) {
  const auto three = keep_layout(dp2_pp2(), 3);  // 3 ranks: one pp2 replica, a slot idle
  ASSERT_TRUE(three);
  EXPECT_EQ(three->pp, 2);
  EXPECT_EQ(three->dp, 1);
  EXPECT_EQ(three->micro_batch, 2);
  EXPECT_EQ(three->global_batch, 8);
  EXPECT_EQ(three->zero_stage, 0);  // ZeRO at dp 1 shards nothing
  EXPECT_FALSE(keep_layout(dp2_pp2(), 1));
  // dp 3 does not divide 8: dp 2 is taken; a micro-batch that no longer divides the replica's share shrinks.
  planner::PlanChoice c = dp2_pp2();
  c.pp = 1, c.dp = 4, c.micro_batch = 2, c.global_batch = 12;
  const auto k = keep_layout(c, 3);
  ASSERT_TRUE(k);
  EXPECT_EQ(k->dp, 3);
  EXPECT_EQ(k->micro_batch, 2);
  c.global_batch = 8;
  c.micro_batch = 2;
  const auto k2 = keep_layout(c, 3);
  ASSERT_TRUE(k2);
  EXPECT_EQ(k2->dp, 2);
  EXPECT_EQ(k2->global_batch % (k2->dp * k2->micro_batch), 0);
}

// cp and ep are part of the layout kept: the ranks are tp × cp × dp × pp (world()), and dp shrinks only to sizes
// whose dp × cp ranks ep still divides; ZeRO stays while dp × cp > 1 (it shards over them).
TEST(KeepLayout, KeepsCpAndEpAndCountsTheirRanks) {
  planner::PlanChoice c = dp2_pp2();
  c.pp = 1, c.cp = 2, c.dp = 2, c.global_batch = 12, c.zero_stage = 3;
  EXPECT_EQ(c.world(), 4);
  const auto three = keep_layout(c, 3);  // a cp2 replica fits, dp 1 (dp 3 would need 6 ranks)
  ASSERT_TRUE(three);
  EXPECT_EQ(three->cp, 2);
  EXPECT_EQ(three->dp, 1);
  EXPECT_EQ(three->world(), 2);
  EXPECT_EQ(three->zero_stage, 3);  // still sharded over the 2 cp ranks
  EXPECT_FALSE(keep_layout(c, 1));
  // ep 4 from dp 4: 3 ranks would be dp 3 (12 splits), which ep 4 does not divide; dp 2 neither; nothing fits.
  planner::PlanChoice e = dp2_pp2();
  e.pp = 1, e.dp = 4, e.ep = 4, e.global_batch = 12;
  EXPECT_FALSE(keep_layout(e, 3));
  e.ep = 2;  // ep 2: dp 3 is skipped, dp 2 kept
  const auto k = keep_layout(e, 3);
  ASSERT_TRUE(k);
  EXPECT_EQ(k->dp, 2);
  EXPECT_EQ(k->ep, 2);
  EXPECT_EQ(k->world(), 2);
}

TEST(SmallestWorld, FirstThatFits) {
  EXPECT_EQ(smallest_world(3, 8, [](int w) { return w >= 5; }), 5);
  EXPECT_FALSE(smallest_world(3, 8, [](int) { return false; }));
}

TEST(CheckpointInterval, FromTheLostWorkTarget) {
  EXPECT_EQ(checkpoint_interval_for(10.0, 0.3), 33);
  EXPECT_EQ(checkpoint_interval_for(0.1, 0.3), 1);  // at least every step
}

TEST(RestartRecord, SecondsLostSumTheirPartsAndRunJsonKeepsTheTrainersKeys) {
  RestartRecord r;
  r.number = 1;
  r.redone_s = 1.5;
  r.detection_s = 0.25;
  r.teardown_s = 0.5;
  EXPECT_DOUBLE_EQ(r.seconds_lost(), 2.25);  // the restart's own phases not measured yet
  r.startup_s = 1.0, r.load_s = 0.125, r.first_step_s = 0.125;
  EXPECT_DOUBLE_EQ(r.seconds_lost(), 3.5);

  const auto dir = std::filesystem::temp_directory_path() / "cleave_restart_record_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string metrics = (dir / "metrics.jsonl").string();
  {
    std::ofstream out(metrics);
    out << "{\"step\":1,\"loss\":4.1,\"step_ms\":100}\n{\"step\":2,\"loss\":4.0,\"step_ms\":120}\n"
        << "{\"step\":3,\"loss\":3.9,\"step_ms\":300,\"restart\":1,\"restart_startup_s\":0.75,\"restart_load_s\":0.5,"
           "\"restart_first_step_s\":0.3}\n";
  }
  const MetricsRows rows = read_metrics_rows(metrics);
  EXPECT_EQ(rows.last_step, 3);
  EXPECT_DOUBLE_EQ(rows.ms_after(1), 420.0);
  RestartRecord filled;
  filled.number = 1;
  ASSERT_TRUE(fill_phase_times(filled, metrics));
  EXPECT_DOUBLE_EQ(*filled.startup_s, 0.75);
  filled.number = 2;
  EXPECT_FALSE(fill_phase_times(filled, metrics));

  const std::string run_json = (dir / "run.json").string();
  { std::ofstream(run_json) << "{\"world_size\": 3, \"resumes\": []}\n"; }
  SupervisorRecord record;
  record.restarts.push_back(r);
  ASSERT_TRUE(merge_restarts_into_run_json(run_json, record));
  std::ifstream in(run_json);
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j.at("world_size"), 3);
  EXPECT_DOUBLE_EQ(j.at("restarts").at(0).at("seconds_lost").get<double>(), 3.5);
  EXPECT_FALSE(merge_restarts_into_run_json((dir / "none.json").string(), record));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cleave::supervise::recovery_policy_test

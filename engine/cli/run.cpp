// `cleave run --slots N [--hostfile F] [--min-ranks M] [--max-restarts R] [--keep-layout] [--health-check CMD]
// [--max-lost-seconds S] [--launcher CMD] [--profile FILE] [--memory-limit SIZE] -- CONFIG [train options]`:
// supervises a training job (engine/supervise/supervisor.hpp): starts `mpiexec -n N cleave train ...` (or srun
// inside a SLURM allocation), and on a failure restarts it on the ranks left, re-planned and resharded from the
// newest complete checkpoint, with the same global batch. No MPI in this process: it only starts and watches.
// Invariant: everything after "--" is `cleave train`'s (CONFIG, --set, --resume, ...), passed unchanged to the
// first attempt; restarts add --resume auto, the layout's --set values and --restart-record.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/cli/args.hpp"
#include "engine/cli/commands.hpp"
#include "engine/core/english.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/supervise/supervisor.hpp"

namespace cleave::cli {
namespace {

ArgParser run_args() {
  ArgParser p("run",
              "cleave run (--slots N | --hostfile FILE) [--min-ranks M] [--max-restarts R] [--keep-layout]\n"
              "                  [--health-check CMD] [--max-lost-seconds S] [--launcher CMD] [--profile FILE]\n"
              "                  [--memory-limit SIZE] -- [CONFIG.json] [cleave train options]",
              R"(Runs `cleave train` under a supervisor that keeps it going through failures: it starts the ranks
(mpiexec -n N, or srun --mpi=pmix inside a SLURM allocation), watches them, and when a rank is killed, hangs
(the watchdog, train.comm_timeout_s, ends the job and names it) or fails, it ends the job, drops the failed
rank's slot (and every slot --health-check refuses), picks a layout for the ranks left (--keep-layout: the
same tp x cp x pp and ep with a smaller dp; default: the planner's best plan under the memory cap) and restarts from the
newest complete checkpoint with the same global batch, at most --max-restarts times. Every attempt and
restart is recorded in <train.out_dir>/supervisor/supervisor.json, run.json ("restarts") and metrics.jsonl
(the first row after a restart). A job that refuses its command line or config (exit 64) or its checkpoint
(66, 78) is not restarted: cleave run ends at once with its exit code. SIGTERM (a preemption notice) makes every
rank save a checkpoint and stop (exit 75). docs/multi-rank.md, "Recovery".)");
  p.count("--slots", "N", "ranks on this machine (default: SLURM_NTASKS inside an allocation)", std::nullopt)
      .text("--hostfile", "FILE", "Open MPI hostfile ('HOST slots=N' lines): the slots, in order")
      .count("--min-ranks", "M", "give up when fewer ranks are left", 1)
      .count("--max-restarts", "R", "restarts at most (then the job ends with a report; nothing is lost)", 3, 0)
      .flag("--keep-layout",
            "keep tp x cp x pp and ep, shrink dp (default: the planner's best plan for the ranks left)")
      .text("--health-check", "CMD",
            "a shell command run for each slot after a failure, with CLEAVE_SLOT_HOST and\n"
            "CLEAVE_SLOT_INDEX set; a non-zero exit drops the slot")
      .number("--max-lost-seconds", "S",
              "the most work a failure may cost: restarts save every floor(S / step time)\n"
              "steps (checkpoint.interval), from the step time measured before the failure", 0.0, 0)
      .number("--teardown-grace", "S", "after a failure line, seconds the launcher may take to end the job", 20.0, 0)
      .text("--launcher", "CMD",
            "launcher words before `-n N` (default mpiexec; srun --mpi=pmix --kill-on-bad-exit=1 in a\n"
            "SLURM allocation), e.g. \"mpiexec --oversubscribe\". Split at spaces, with no quoting: a\n"
            "word holding a space (a path, a flag's value) cannot be given; put the launcher in a\n"
            "script on a path without spaces and name that")
      .text("--profile", "FILE", "hardware profile for the planner (default: measure this machine once)")
      .text("--memory-limit", "SIZE", "the planner's cap per rank (default: device.memory_limit)")
      .epilog(R"(example:   cleave run --slots 4 --max-restarts 3 -- examples/gpt_fortunes.json --set train.steps=2000 \
               --set checkpoint.interval=50
under SLURM: salloc -n 8 cleave run --min-ranks 4 -- CONFIG.json)");
  return p;
}

std::vector<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

}  // namespace

int run_run(int argc, char** argv) {
  std::vector<std::string> mine, theirs;
  bool after = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (!after && a == "--") {
      after = true;
      continue;
    }
    (after ? theirs : mine).push_back(a);
  }
  const ArgParser parser = run_args();
  // Without --, a config among run's own options was refused as an unexpected argument, which did not say where it
  // goes: the refusal then says so.
  const Args args = [&] {
    try {
      return parser.parse(mine);
    } catch (const Error& e) {
      if (after) throw;
      throw InputError(fmt::format("{}; the training job (CONFIG.json, its --set) goes after --, e.g. cleave run "
                                   "--slots 4 -- CONFIG.json --set ...",
                                   e.what()));
    }
  }();
  if (parser.print_help_if_asked(args)) return 0;
  CLEAVE_CHECK_INPUT(after, "run: put the training job after --, e.g. cleave run --slots 4 -- CONFIG.json --set ...");
  supervise::SuperviseOptions o;
  for (std::size_t i = 0; i < theirs.size(); ++i) {
    const std::string& a = theirs[i];
    const bool has_value = i + 1 < theirs.size();
    if (a == "--set" && has_value) {
      o.overrides.push_back(theirs[++i]);
    } else if (a == "--resume" && has_value) {
      o.resume = theirs[++i];
    } else if (a == "--restart-record") {
      throw InputError("run: --restart-record is cleave run's own (it writes one per restart); remove it after --");
    } else if (a.rfind("--", 0) == 0) {
      o.train_args.push_back(a);
      if (has_value && theirs[i + 1].rfind("--", 0) != 0) o.train_args.push_back(theirs[++i]);
    } else {
      CLEAVE_CHECK_INPUT(o.config_path.empty(), "run: two configs after --: {} and {}", o.config_path, a);
      o.config_path = a;
    }
  }
  const char* in_slurm = std::getenv("SLURM_JOB_ID");
  o.launcher = words(args.text("--launcher"));
  CLEAVE_CHECK_INPUT(!args.given("--launcher") || !o.launcher.empty(),
                     "run: --launcher is empty; give the launcher's words, e.g. --launcher \"mpiexec --oversubscribe\", "
                     "or drop --launcher for the default (mpiexec; srun --mpi=pmix in a SLURM allocation)");
  o.slurm = in_slurm != nullptr && o.launcher.empty() && !args.given("--hostfile");
  const std::string hostfile = args.text("--hostfile");
  if (!hostfile.empty()) {
    // A file the command line names: missing, a directory or malformed is bad input (exit 64; a malformed one exited
    // 1, which a script driving cleave run could not tell from a failed job).
    CLEAVE_CHECK_INPUT(!std::filesystem::is_directory(hostfile),
                       "run: --hostfile {} is a directory; give a file of 'HOST slots=N' lines", hostfile);
    std::ifstream in(hostfile);
    CLEAVE_CHECK_INPUT(in.good(), "run: --hostfile {}: cannot read it", hostfile);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    o.slots = reading_input([&] { return supervise::parse_hostfile(text, hostfile); });
    o.use_hostfile = true;
    CLEAVE_CHECK_INPUT(!args.given("--slots") || args.count("--slots") == static_cast<std::int64_t>(o.slots.size()),
                 "run: --slots {} but --hostfile {} lists {}; give one of them", args.count("--slots"), hostfile,
                 count_of(static_cast<std::int64_t>(o.slots.size()), "slot"));
  } else if (args.given("--slots")) {
    o.slots = supervise::local_slots(static_cast<int>(args.count("--slots")));
  } else if (const char* tasks = std::getenv("SLURM_NTASKS"); tasks != nullptr && in_slurm != nullptr) {
    o.slots = supervise::slurm_slots(tasks);
  } else {
    throw InputError("run: give --slots N or --hostfile FILE (the ranks the job may use)");
  }
  o.min_ranks = static_cast<int>(args.count("--min-ranks"));
  o.max_restarts = static_cast<int>(args.count("--max-restarts"));
  o.keep_layout = args.on("--keep-layout");
  o.health_check = args.text("--health-check");
  CLEAVE_CHECK_INPUT(!args.given("--health-check") || o.health_check.find_first_not_of(" \t") != std::string::npos,
                     "run: --health-check is empty; give a shell command that exits 0 for a healthy slot, or drop "
                     "--health-check (every slot left is then used)");
  o.max_lost_seconds = args.number("--max-lost-seconds");
  o.teardown_grace_s = args.number("--teardown-grace");
  o.profile = args.text("--profile");
  o.memory_limit = args.text("--memory-limit");
  o.cleave = std::filesystem::read_symlink("/proc/self/exe").string();
  return supervise::supervise(o);
}

}  // namespace cleave::cli

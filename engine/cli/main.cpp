// `cleave` entry point: dispatches to a subcommand and is the only place that turns an exception into an
// exit code (ExitCode, engine/core/exit_code.hpp: 1; 66 for NoIntactCheckpoint and 78 for CheckpointMismatch, which
// `cleave run` reads: engine/checkpoint/checkpoint_damage.hpp).
// Under MPI an error is printed once (comm::end_job_after_error: rank 0 when every rank hit it, else the failing
// rank, which then aborts the job so no peer waits forever on a collective it will never join).
#include <mpi.h>
#include <signal.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "cleave/config.hpp"
#include "engine/cli/args.hpp"
#include "engine/cli/commands.hpp"
#include "engine/checkpoint/checkpoint_damage.hpp"
#include "engine/cli/runtime_env.hpp"
#include "engine/comm/launch_env.hpp"
#include "engine/comm/mpi/mpi_runtime.hpp"
#include "engine/core/error.hpp"
#include "engine/core/exit_code.hpp"
#include "engine/core/input_error.hpp"
#include "engine/core/log.hpp"

namespace {

struct Command {
  std::string_view name;
  std::string_view summary;
  int (*run)(int argc, char** argv);
};

// `cleave version` takes no arguments: --help says so; anything else is a usage error (exit 64), as another
// command's unknown option is.
int run_version(int argc, char** argv) {
  if (argc > 1 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::printf("usage: cleave version\n\nPrints the version, the compiled backends, the CPU and its kernels, the GEMM "
                "library per dtype under device.blas auto, and the runtime settings cleave made (threads, wait "
                "policy). Takes no options.\n");
    return 0;
  }
  CLEAVE_CHECK_INPUT(argc <= 1, "version: takes no arguments, got '{}' (cleave version, or cleave --version)", argv[1]);
  std::printf("cleave %s (BLAS: %s, CUDA backend: %s)\n", CLEAVE_VERSION, CLEAVE_BLAS_NAME,
              CLEAVE_WITH_CUDA ? "compiled" : "not compiled");
  // The CPU and the kernels in use (engine/core/cpu_features.hpp, kernels/cpu/blas_coretype.hpp).
  std::printf("cpu: %s\n", cleave::cli::describe_cpu_runtime().first.c_str());
  std::printf("gemm: %s\n", cleave::cli::describe_cpu_gemm().c_str());  // kernels/ops/cpu_blas.hpp
  std::printf("runtime: %s\n", cleave::cli::describe_runtime_env().c_str());
  return 0;
}

constexpr Command kCommands[] = {
    {"train", "train a model from a JSON config (default: a tiny GPT on a synthetic task)", cleave::cli::run_train},
    {"bench", "benchmark pipeline schedules for real (under mpirun): table, bench.json, bench.html",
     cleave::cli::run_bench},
    {"plan", "choose tp x pp x dp, schedule, micro-batch and ZeRO under a memory cap (simulated, ranked)",
     cleave::cli::run_plan},
    {"profile", "measure this machine for a config: block times by tp and micro-batch, P2P and collective fits",
     cleave::cli::run_profile},
    {"simulate", "simulate a pipeline schedule: bubble, memory, Chrome trace and SVG timeline",
     cleave::cli::run_simulate},
    {"verify", "train a layout and a single-rank reference; compare losses and weights (under mpirun)",
     cleave::cli::run_verify},
    {"export", "consolidate a checkpoint (any layout) into one safetensors file, or a Hugging Face directory",
     cleave::cli::run_export},
    {"tokenize", "encode text files with a Hugging Face tokenizer.json into llm.c token shards",
     cleave::cli::run_tokenize},
    {"import", "convert a Hugging Face model directory (GPT-2, Llama, Mistral, Qwen, Mixtral) into a checkpoint",
     cleave::cli::run_import},
    {"generate", "sample text from a gpt, llama or moe checkpoint on one CPU rank (bytes, or --tokenizer tokenizer.json)",
     cleave::cli::run_generate},
    {"report", "write report.html for a run directory (curves, memory per rank, layout, config)",
     cleave::cli::run_report},
    {"run", "supervise cleave train: restart on the ranks left after a failure, re-planned, from the newest checkpoint",
     cleave::cli::run_run},
    {"version", "print the version and the compiled backends", run_version},
};

void print_usage(std::FILE* out) {
  std::fprintf(out, "usage: cleave <command> [options]   (cleave <command> --help for details)\n\ncommands:\n");
  for (const auto& c : kCommands) {
    std::fprintf(out, "  %-10.*s %.*s\n", static_cast<int>(c.name.size()), c.name.data(),
                 static_cast<int>(c.summary.size()), c.summary.data());
  }
  std::fprintf(out, "\nmulti-rank: mpirun -np N cleave train CONFIG\n");
}

bool launched_by_mpi() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  return initialized != 0;
}

}  // namespace

int main(int argc, char** argv) {
  cleave::cli::apply_runtime_env(argv);
  // A file-size limit (ulimit -f) then fails the write with EFBIG, which the writer reports with the file's
  // name, instead of SIGXFSZ killing the rank without a word.
  ::signal(SIGXFSZ, SIG_IGN);
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    print_usage(argc < 2 ? stderr : stdout);
    return cleave::exit_status(argc < 2 ? cleave::ExitCode::kUsage : cleave::ExitCode::kOk);
  }
  for (const auto& command : kCommands) {
    const bool version_flag = command.name == "version" && std::strcmp(argv[1], "--version") == 0;
    if (command.name != argv[1] && !version_flag) continue;
    try {
      return command.run(argc - 1, argv + 1);
    } catch (const std::exception& e) {
      if (launched_by_mpi() && cleave::log::world_size() > 1) {
        cleave::comm::end_job_after_error(std::string("error: ") + e.what(), cleave::checkpoint::exit_code_of(e));
      }
      // Before MPI started (the command line, a file check), every rank of an mpirun sees the same error: the
      // launcher's rank 0 prints it, the others exit with the same code quietly.
      const auto place = cleave::comm::world_place_from_env(cleave::comm::process_env());
      if (!launched_by_mpi() && place && place->rank != 0) return cleave::checkpoint::exit_code_of(e);
      cleave::log::error("{}", e.what());
      return cleave::checkpoint::exit_code_of(e);
    }
  }
  std::vector<std::string> names;
  for (const auto& c : kCommands) names.emplace_back(c.name);
  const std::string near = cleave::cli::closest_spelling(argv[1], names);
  std::fprintf(stderr, "cleave: unknown command '%s'%s\n\n", argv[1],
               near.empty() ? "" : (" (did you mean " + near + "?)").c_str());
  print_usage(stderr);
  return cleave::exit_status(cleave::ExitCode::kUsage);
}

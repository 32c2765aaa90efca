// The `cleave` subcommands. Each lives in its own file under engine/cli/ and is listed in main.cpp's
// table; argv[0] is the subcommand's name. A command returns the process exit code and throws
// cleave::Error for bad input (main prints it and aborts the MPI job so no peer hangs).
#pragma once

namespace cleave::cli {

int run_train(int argc, char** argv);
int run_simulate(int argc, char** argv);
// `cleave simulate --config ...` (simulate_config.cpp): run_simulate hands over when --config is given.
int run_simulate_config(int argc, char** argv);
int run_verify(int argc, char** argv);
int run_export(int argc, char** argv);
int run_import(int argc, char** argv);
int run_generate(int argc, char** argv);
int run_tokenize(int argc, char** argv);
int run_bench(int argc, char** argv);
int run_plan(int argc, char** argv);
int run_profile(int argc, char** argv);
// `cleave profile --gemm ...` (profile_gemm.cpp): run_profile hands over when --gemm is given.
int run_profile_gemm(int argc, char** argv);
int run_report(int argc, char** argv);
// `cleave run`: the supervisor (engine/supervise/); no MPI in its own process.
int run_run(int argc, char** argv);

}  // namespace cleave::cli

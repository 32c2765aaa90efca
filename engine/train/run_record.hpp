// run.json (engine/report/run_summary.hpp): every rank's coordinates, stages and allocator peaks by category,
// with the memory plan's estimate per pp rank, so the report draws per-rank memory against
// device.memory_limit without the ranks.
#pragma once

#include <string>

#include "engine/report/run_summary.hpp"
#include "engine/train/rank_setup.hpp"

namespace cleave::train {

// Gathered onto every rank (collective over the world).
report::RunSummary gather_run_summary(RankSetup& setup);
// run.json's cpu_gemm for `config` in this process: ops::resolved_cpu_gemms(device.blas) by name, with
// ops::cpu_gemm_description; empty unless device.type is cpu (a cuda run's GEMMs are cuBLAS's).
report::CpuGemmRecord cpu_gemm_record(const config::RunConfig& config);
// World rank 0 writes it as `directory`/run.json.
void write_run_summary(const report::RunSummary& summary, const std::string& directory);

}  // namespace cleave::train

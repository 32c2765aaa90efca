// run.json: what a finished run's report needs beyond metrics.jsonl and config.json — the layout each rank
// held and each rank's memory by category (measured peaks from its allocator, and the memory plan's
// estimate) against device.memory_limit. The trainer gathers every rank's figures to world rank 0, which
// writes the file; `cleave report` reads it back.
//
// Invariant: categories[i] names column i of every rank's peak_bytes and estimate_bytes; a reader accepts any
// category list (a newer run may have more), so the report never hard-codes the allocator's enum.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cleave::report {

struct RankSummary {
  int rank = 0;
  int tp_rank = 0;
  int cp_rank = 0;  // context parallelism (0 without it)
  int dp_rank = 0;
  int ep_rank = 0;  // expert parallelism: which E / ep experts the rank holds (0 without it)
  int pp_rank = 0;
  std::vector<int> stages;                   // model stages (chunks) this rank held
  std::vector<std::int64_t> peak_bytes;      // per category, each at its own peak moment
  std::int64_t peak_total = 0;               // peak of the sum (<= the sum of category peaks)
  std::vector<std::int64_t> estimate_bytes;  // the memory plan's estimate per category (empty = none)
  // The memory plan's total (MemoryPlan::total(): the figure the cap check compares, below the sum of the categories
  // where buffers held only inside an attention block peak with the activations); 0 = none (older run.json files:
  // the report then sums estimate_bytes).
  std::int64_t estimate_total_bytes = 0;
  // The memory plan's page-locked host memory (MemoryPlan::host_pinned: a GPU rank's staged micro-batches, losses
  // row and moe staging), apart from the device categories; 0 = none (written only when > 0).
  std::int64_t estimate_host_pinned_bytes = 0;
};

// A config key that differed when the run resumed (engine/train/checkpoint/config_change.hpp); values as JSON text.
struct ConfigChangeRecord {
  std::string key;
  std::string before;      // "absent" when the key was not in the old config
  std::string after;
  std::string allowed_by;  // "resume" (changes freely) or "--allow-config-change"
};

// One resume of the run: the step it continued from and what the config changed.
struct ResumeRecord {
  std::int64_t at_step = 0;
  std::string checkpoint;  // the step directory it loaded
  std::vector<ConfigChangeRecord> config_changes;
};

// World rank 0's CPU GEMM libraries on a run with device.type cpu (kernels/ops/cpu_blas.hpp's rule, resolved on that
// rank's CPU: ops::resolved_cpu_gemms and ops::cpu_gemm_description). Empty (device_blas "") on a cuda run and in a
// run.json written before it was recorded.
struct CpuGemmRecord {
  std::string device_blas;    // the config's device.blas: "auto", "openblas", "blis", "onednn"
  std::string f32;            // the library f32 operands run on: "openblas", "blis", "onednn"
  std::string bf16;           // the library bf16 operands run on
  bool bf16_kernels = false;  // bf16 operands run on the library's bf16 kernels (false: widened to f32 first)
  // "f32 onednn, bf16 onednn on bf16 kernels (device.blas auto): oneDNN 2.6.3 (isa avx512_core_bf16)", as
  // `cleave version` and the run log say it
  std::string description;
  friend bool operator==(const CpuGemmRecord&, const CpuGemmRecord&) = default;
};

struct RunSummary {
  int world_size = 1;
  std::string grid;        // "tp=1 dp=2 pp=2 (world 4)"
  std::string schedule;    // "1f1b", "zb_v on one rank, running its 2 chunks" (pp 1), or "single stage"
  std::string partition;   // "blocks per stage [3,2]"
  std::string model;       // "gpt, 7 blocks"
  std::string batch;       // "global 8 = micro 2 x accum 2 x dp 2"
  std::string throughput_unit = "tok";
  std::int64_t memory_limit = 0;  // device.memory_limit in bytes, 0 = no cap
  // World rank 0's CPU and kernels: "AMD EPYC (AuthenticAMD family 25 model 17; avx avx2 ...)" and "OpenBLAS
  // 0.3.21 ... (core Cooperlake)" (engine/core/cpu_features.hpp, kernels/cpu/blas_coretype.hpp). Empty in a
  // run.json written before they were recorded.
  std::string cpu;
  std::string cpu_kernels;
  CpuGemmRecord cpu_gemm;  // which library runs the GEMMs (cpu_kernels names OpenBLAS whichever does)
  std::vector<std::string> categories;
  std::vector<RankSummary> ranks;
  std::vector<ResumeRecord> resumes;  // every resume of this run directory, oldest first
  // Throughput (engine/train/throughput.hpp, docs/report.md): the model FLOPs of one step, and the peak FLOP/s
  // per rank MFU is measured against with where it comes from (0 and "" = none given). Absent in older files.
  double model_flops_per_step = 0;
  double peak_flops_per_rank = 0;
  std::string peak_source;
  // train --init-from: the weights' source and the context length it trained at ("Hugging Face
  // LlamaForCausalLM in DIR: seq_len 64 of at most 8192 (rotary positions: nothing sliced)"); "" otherwise.
  std::string init_from;
};

// Pretty JSON text (ends with a newline).
std::string to_json_text(const RunSummary& summary);
// Throws cleave::Error naming `path` and the offending field when the text is not a run.json.
RunSummary parse_run_summary(const std::string& text, const std::string& path);

}  // namespace cleave::report

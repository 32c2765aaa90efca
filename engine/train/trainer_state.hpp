// Internal to engine/train: what one Trainer holds (its layout, stages, optimizer, data, executors and the
// run's own allocator and op context). Shared by the files that implement Trainer: trainer.cpp (set-up, step,
// run), evaluation.cpp, parameter_gather.cpp, measured_trace.cpp and run_record.cpp.
//
// Invariants: every tensor of the run comes from `allocator` (its cap is device.memory_limit; its peak is
// the run's peak), nothing here is shared with another Trainer in the same process.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "engine/comm/grid.hpp"
#include "engine/optim/lr_schedule.hpp"
#include "engine/optim/optimizer.hpp"
#include "engine/report/run_summary.hpp"
#include "engine/train/data/data_source.hpp"
#include "engine/train/data_parallel.hpp"
#include "engine/train/fault_injection.hpp"
#include "engine/train/trainer.hpp"
#include "pipeline/executor.hpp"

namespace cleave::train {

struct Trainer::State {
  config::RunConfig config;
  comm::Communicator& world;
  comm::ProcessGrid grid;
  comm::GridCoords coords;
  comm::GridCommunicators groups;
  std::unique_ptr<Allocator> allocator;                // this run's memory: cap, peak, accounting
  std::unique_ptr<ops::DeviceResources> resources;     // backend handles of the run's device (null on cpu)
  layers::Context context;                             // device, allocator, stream, GEMM mode, precision
  std::unique_ptr<comm::Communicator> model_parallel;  // tp × pp ranks of this replica (norms, losses)
  std::unique_ptr<comm::Communicator> tied_group;      // the two ranks holding the tied table's copies
  planning::Plan plan;
  config::ResolvedBatch batch;

  std::vector<std::unique_ptr<pipeline::StageModule>> stages;
  std::map<int, pipeline::StageModule*> stage_by_index;
  optim::ParamList params;
  std::string tied_name;                      // the model's tied parameter ("" when none)
  std::shared_ptr<layers::Param> tied_table;  // this rank's copy of the tied table when it is split
  bool counts_tied_table = true;              // false on the last stage's copy (counted once in norms)
  std::unique_ptr<optim::Optimizer> optimizer;  // null under ZeRO-1 (data_parallel holds the sharded one)
  std::unique_ptr<DataParallel> data_parallel;  // dp > 1: bucketed, overlapped reduction; ZeRO-1
  optim::LrSchedule lr_schedule;
  std::unique_ptr<DataSource> train_data;
  std::unique_ptr<DataSource> eval_data;
  BatchLayout layout;
  std::unique_ptr<pipeline::Executor> executor;       // the training step
  pipeline::Schedule eval_schedule;                   // forward-only (pipeline/forward_only.hpp)
  std::unique_ptr<pipeline::Executor> eval_executor;  // evaluation through the same interpreter
  std::int64_t current_step = 0;
  std::int64_t eval_batch = 0;  // the evaluation batch the eval executor is reading
  std::vector<pipeline::TimedAction> last_timeline;
  Tensor microbatch_losses;  // [dp * micro-batches] f32: the step's loss of every global micro-batch
  // Filled by the executor's hooks during a step (the step's tail runs inside the schedule).
  int stages_reduced = 0;
  double step_grad_norm = 0;
  double step_lr = 0;
  std::int64_t step_dp_bytes = 0;  // bytes the data-parallel gradient collectives carried from this rank
  std::optional<FaultPlan> fault;  // CLEAVE_FAULT_INJECT (a test hook of the failure drills); usually empty

  State(config::RunConfig c, comm::Communicator& w);

  bool holds_stage(int stage) const { return stage_by_index.count(stage) != 0; }
  bool reports() const { return world.rank() == 0; }
};

// Mixed precision: every parameter's bf16 working copy := its f32 master value (a no-op in fp32 runs).
// trainer.cpp; called after every optimizer step and after a checkpoint is loaded.
void refresh_working_copies(Trainer::State& s);

// Gathers the last step's measured timeline of replica 0's pp ranks onto world rank 0; writes trace.json and
// trace.svg into `directory` there (measured_trace.cpp).
pipeline::Timeline gather_timeline(Trainer::State& s);
void write_measured_trace(Trainer::State& s, const std::string& directory);

// Every rank's coordinates, stages and memory peaks by category, with the memory plan's estimates, gathered
// onto every rank (collective); world rank 0 writes it as run.json for the report (run_record.cpp).
report::RunSummary gather_run_summary(Trainer::State& s);
void write_run_summary(const report::RunSummary& summary, const std::string& directory);

}  // namespace cleave::train

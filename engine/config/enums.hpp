// The enum-valued config keys: each is an enum class with one name table (engine/core/enum_names.hpp) that
// the reader, the writer, error messages and suggestions use. Text is parsed once, in config.cpp's reader;
// everything after compares enums. Enums owned by a lower layer (the model family, recomputation, the
// partition method, precision, device type, MPI progress, the moe router) are named here from where they live.
//
// Extending: add the value to the enum and its table; the round-trip test (tests/unit/config/enums_test.cpp)
// covers every table, and config.cpp's reader lists the new name in "is not one of" messages by itself.
#pragma once

#include <array>

#include "engine/comm/p2p_progress.hpp"
#include "engine/core/device.hpp"
#include "engine/core/enum_names.hpp"
#include "kernels/ops/cpu_blas.hpp"
#include "kernels/ops/precision.hpp"
#include "partition/cost_model.hpp"
#include "partition/families/moe.hpp"
#include "partition/model_spec.hpp"
#include "partition/stage_partitioner.hpp"

namespace cleave::config {

using partition::Activation;       // model.activation: relu | gelu
using partition::ModelType;        // model.type: gpt | mlp | cnn
using partition::PartitionMethod;  // parallel.partition.method: cost | uniform | parameters | manual
using partition::Recompute;        // train.recompute: none | selective | full
using partition::RouterKind;       // model.router: softmax | sigmoid
using ops::Precision;              // device.precision: fp32 | bf16
using ops::CpuBlas;                // device.blas: auto | openblas | blis | onednn
using comm::P2PProgress;           // parallel.p2p_progress: auto | thread | off
using cleave::DeviceType;          // device.type: cpu | cuda

// optimizer.type
enum class OptimizerType { kAdamw, kSgd };
constexpr std::array<EnumName<OptimizerType>, 2> enum_names(OptimizerType) {
  return {{{OptimizerType::kAdamw, "adamw"}, {OptimizerType::kSgd, "sgd"}}};
}

// optimizer.schedule: the learning-rate decay after warm-up (to optimizer.min_lr at train.steps).
enum class LrScheduleType { kCosine, kConstant, kLinear };
constexpr std::array<EnumName<LrScheduleType>, 3> enum_names(LrScheduleType) {
  return {{{LrScheduleType::kCosine, "cosine"}, {LrScheduleType::kConstant, "constant"},
           {LrScheduleType::kLinear, "linear"}}};
}

// parallel.grad_reduce_dtype: the dtype data-parallel gradient buckets travel in.
enum class GradReduceDtype { kFp32, kBf16 };
constexpr std::array<EnumName<GradReduceDtype>, 2> enum_names(GradReduceDtype) {
  return {{{GradReduceDtype::kFp32, "fp32"}, {GradReduceDtype::kBf16, "bf16"}}};
}

// optimizer.zero_reduce: when ZeRO-2 and 3 reduce-scatter the gradients (resolved_zero_reduce() in config.hpp
// resolves kAuto). Per micro-batch: each bucket as soon as the micro-batch's last contribution to it is in,
// keeping only this rank's shard (accumulated over the micro-batches); per step: once, after the last one.
enum class ZeroReduce { kAuto, kPerMicrobatch, kPerStep };
constexpr std::array<EnumName<ZeroReduce>, 3> enum_names(ZeroReduce) {
  return {{{ZeroReduce::kAuto, "auto"}, {ZeroReduce::kPerMicrobatch, "per_microbatch"},
           {ZeroReduce::kPerStep, "per_step"}}};
}

// parallel.comm_backend (engine/config/comm_backend.hpp resolves kAuto).
enum class CommBackend { kAuto, kMpi, kNccl };
constexpr std::array<EnumName<CommBackend>, 3> enum_names(CommBackend) {
  return {{{CommBackend::kAuto, "auto"}, {CommBackend::kMpi, "mpi"}, {CommBackend::kNccl, "nccl"}}};
}

// parallel.context_parallel_comm: how context-parallel ranks exchange keys and values (docs/multi-rank.md).
enum class ContextParallelComm { kRing, kAllToAll };
constexpr std::array<EnumName<ContextParallelComm>, 2> enum_names(ContextParallelComm) {
  return {{{ContextParallelComm::kRing, "ring"}, {ContextParallelComm::kAllToAll, "all_to_all"}}};
}

// parallel.auto_schedule_objective: what schedule `auto`'s search minimises first (pipeline/schedules/
// auto_schedule.hpp, AutoScheduleObjective): the step's makespan, or the longest per-rank span (the zero-bubble
// paper's cost, what a step pays when the optimizer step does not synchronise the ranks).
enum class AutoScheduleObjectiveChoice { kMakespan, kSpan };
constexpr std::array<EnumName<AutoScheduleObjectiveChoice>, 2> enum_names(AutoScheduleObjectiveChoice) {
  return {{{AutoScheduleObjectiveChoice::kMakespan, "makespan"}, {AutoScheduleObjectiveChoice::kSpan, "span"}}};
}

// data.type
enum class DataType { kText, kTokens, kDigits, kSynthetic };
constexpr std::array<EnumName<DataType>, 4> enum_names(DataType) {
  return {{{DataType::kText, "text"}, {DataType::kTokens, "tokens"}, {DataType::kDigits, "digits"},
           {DataType::kSynthetic, "synthetic"}}};
}

// data.format (tokens): llmc (llm.c shard with header) | uint16 (headerless).
enum class TokenFileFormat { kLlmc, kUint16 };
constexpr std::array<EnumName<TokenFileFormat>, 2> enum_names(TokenFileFormat) {
  return {{{TokenFileFormat::kLlmc, "llmc"}, {TokenFileFormat::kUint16, "uint16"}}};
}

}  // namespace cleave::config

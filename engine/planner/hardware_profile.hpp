// The planner's hardware profiles: the format (HardwareProfile, load_profile, profile_to_json) lives in
// partition/hardware_profile.hpp, where the plan (engine/run_plan) reads it too; this header adds what measures
// one on this machine (calibrate_this_machine, measure_block_rates, measure_this_machine).
// Invariant: a measured profile satisfies the format's invariants (every number finite and > 0; device_memory 0,
// the format's "none": the planner's own measurement sets no memory cap, so `cleave plan` and `cleave run` without
// --profile cap a plan only by --memory-limit or device.memory_limit), and so reads back through load_profile.
#pragma once

#include <cstdint>

#include "partition/hardware_profile.hpp"
#include "partition/model_spec.hpp"

namespace cleave::planner {

using partition::HardwareProfile;
using partition::Link;
using partition::load_profile;
using partition::profile_to_json;

// Measures this machine for `ranks` ranks sharing it: a GEMM of the given shape ([m, k] x [k, n]) on
// cores / ranks threads for about 0.2 s (its FLOP/s stands for every block; the planner's figures say
// so), memory bandwidth from a streamed add, and the intra-node link from defaults typical of MPI over
// shared memory (latency 20 us, 2 GB/s; --profile replaces them).
HardwareProfile calibrate_this_machine(int ranks, std::int64_t m, std::int64_t n, std::int64_t k);

// Also times one transformer block of `spec` (a gpt) at [1, T, D] (median of 5 after a warm-up) and sets
// the block_*_flops rates from the cost model's FLOPs over the measured times.
void measure_block_rates(HardwareProfile& profile, const partition::ModelSpec& spec, int ranks);

// What `cleave plan` / `simulate --config` / `cleave run` use without --profile: calibrate_this_machine at the
// model's main GEMM shape, plus measure_block_rates for a gpt. No device memory (device_memory 0: no cap).
HardwareProfile measure_this_machine(const partition::ModelSpec& spec, int ranks);

}  // namespace cleave::planner

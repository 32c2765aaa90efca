// The ep imbalance a plan is priced at, and where it comes from: the busiest ep rank's routed rows over the mean,
// which times ep's all-to-alls and the busiest rank's expert GEMMs (step_terms_expert_parallel.cpp). In order:
// the option (`cleave plan` / `simulate --config` `--ep-imbalance F`); the profile's measured figure
// (HardwareProfile::routing_imbalance: the config's model on its own data, `cleave profile`) when it was measured
// at the plan's ep; else the workload's formula for uniformly random top-k routing (partition::workload_ep_imbalance).
// The time's figure only: the memory plan sizes its rows by its own figures (partition::EpMemoryImbalance).
// Invariant: a pure function of its arguments; value >= 1, exactly 1 (source kNone) at ep 1.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "engine/core/enum_names.hpp"
#include "partition/ep_costs.hpp"
#include "partition/model_spec.hpp"
#include "partition/routing_imbalance.hpp"

namespace cleave::planner {

enum class EpImbalanceSource { kNone, kOption, kProfile, kWorkload };
constexpr std::array<EnumName<EpImbalanceSource>, 4> enum_names(EpImbalanceSource) {
  return {{{EpImbalanceSource::kNone, "none"},
           {EpImbalanceSource::kOption, "option"},
           {EpImbalanceSource::kProfile, "profile"},
           {EpImbalanceSource::kWorkload, "workload"}}};
}

struct EpImbalance {
  double value = 1.0;
  EpImbalanceSource source = EpImbalanceSource::kNone;
};

// The figure for a plan at (micro, cp, ep) of `spec`: 1 at ep 1; `given` where > 0; the profile's `measured` where
// it was measured at this ep (at any micro-batch and cp: the figure sums a step's rows, the whole global batch's,
// over the ranks holding each expert group, which the micro-batch and cp do not change); else
// workload_ep_imbalance (with `table`, the search's integral; the same value).
EpImbalance choose_ep_imbalance(double given, const std::optional<partition::MeasuredRoutingImbalance>& measured,
                                const partition::ModelSpec& spec, std::int64_t micro, int cp, int ep,
                                partition::ExpectedMaxTable* table = nullptr);

// Where `f` came from, in words for the outputs: "the option --ep-imbalance", "measured by cleave profile (ep2, 8
// steps of the config's training at micro-batch 8)", "the formula for uniformly random top-k routing".
std::string describe_ep_imbalance(const EpImbalance& f, const std::optional<partition::MeasuredRoutingImbalance>& measured);

}  // namespace cleave::planner

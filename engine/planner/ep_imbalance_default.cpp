// See ep_imbalance_default.hpp.
#include "engine/planner/ep_imbalance_default.hpp"

#include <fmt/format.h>

namespace cleave::planner {

EpImbalance choose_ep_imbalance(double given, const std::optional<partition::MeasuredRoutingImbalance>& measured,
                                const partition::ModelSpec& spec, std::int64_t micro, int cp, int ep,
                                partition::ExpectedMaxTable* table) {
  if (ep <= 1) return {1.0, EpImbalanceSource::kNone};
  if (given > 0) return {given, EpImbalanceSource::kOption};
  if (measured && measured->ep == ep) return {measured->busiest_over_mean, EpImbalanceSource::kProfile};
  return {partition::workload_ep_imbalance(spec, micro, cp, ep, table), EpImbalanceSource::kWorkload};
}

std::string describe_ep_imbalance(const EpImbalance& f, const std::optional<partition::MeasuredRoutingImbalance>& measured) {
  switch (f.source) {
    case EpImbalanceSource::kNone:
      return "no expert parallelism";
    case EpImbalanceSource::kOption:
      return "the option --ep-imbalance";
    case EpImbalanceSource::kProfile:
      return measured ? fmt::format("measured by cleave profile: ep{}, {} steps of the config's training at micro-batch {}",
                                    measured->ep, measured->steps, measured->micro_batch)
                      : std::string("measured by cleave profile");
    case EpImbalanceSource::kWorkload:
      break;
  }
  return measured ? fmt::format("the formula for uniformly random top-k routing (the profile measured ep{} only)",
                                measured->ep)
                  : std::string("the formula for uniformly random top-k routing (the profile has no measured figure)");
}

}  // namespace cleave::planner

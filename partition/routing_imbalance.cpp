// The file form of a profile's measured routing imbalance (partition/routing_imbalance.hpp).
#include "partition/routing_imbalance.hpp"

#include <cmath>

#include "engine/core/error.hpp"
#include "partition/measured_costs.hpp"

namespace cleave::partition {

using nlohmann::json;

namespace {

// `key` of `node`: a finite number >= `floor`, else an Error naming where.
double number_at_least(const json& node, const char* key, double floor, const std::string& where) {
  CLEAVE_CHECK(node.contains(key) && node.at(key).is_number(), "{}: needs a number '{}'", where, key);
  const double v = node.at(key).get<double>();
  CLEAVE_CHECK(std::isfinite(v) && v >= floor, "{}: '{}' is {}, must be a finite number >= {}", where, key, v, floor);
  return v;
}

// `key` of `node`: an integer >= `floor`.
std::int64_t count_at_least(const json& node, const char* key, std::int64_t floor, const std::string& where) {
  CLEAVE_CHECK(node.contains(key) && node.at(key).is_number_integer(), "{}: needs an integer '{}'", where, key);
  const auto v = node.at(key).get<std::int64_t>();
  CLEAVE_CHECK(v >= floor, "{}: '{}' is {}, must be >= {}", where, key, v, floor);
  return v;
}

}  // namespace

json routing_imbalance_to_json(const MeasuredRoutingImbalance& m) {
  json steps = json::array();
  for (double f : m.per_step) steps.push_back(file_number(f));
  return {{"busiest_over_mean", file_number(m.busiest_over_mean)},
          {"ep", m.ep},
          {"steps", m.steps},
          {"micro_batch", m.micro_batch},
          {"per_step", steps},
          {"source", m.source}};
}

MeasuredRoutingImbalance routing_imbalance_from_json(const json& node, const std::string& where) {
  CLEAVE_CHECK(node.is_object(), "{}: expected an object {{\"busiest_over_mean\", \"ep\", \"steps\", \"micro_batch\", "
               "\"per_step\", \"source\"}}", where);
  MeasuredRoutingImbalance m;
  m.busiest_over_mean = number_at_least(node, "busiest_over_mean", 1.0, where);
  m.ep = static_cast<int>(count_at_least(node, "ep", 2, where));
  m.steps = static_cast<int>(count_at_least(node, "steps", 1, where));
  m.micro_batch = count_at_least(node, "micro_batch", 1, where);
  CLEAVE_CHECK(node.contains("per_step") && node.at("per_step").is_array() &&
                   node.at("per_step").size() == static_cast<std::size_t>(m.steps),
               "{}: 'per_step' must be a list of {} figures (one per step, 'steps')", where, m.steps);
  for (std::size_t i = 0; i < node.at("per_step").size(); ++i) {
    const json& f = node.at("per_step")[i];
    CLEAVE_CHECK(f.is_number() && std::isfinite(f.get<double>()) && f.get<double>() >= 1.0,
                 "{}: per_step[{}] is {}, must be a finite number >= 1 (the busiest rank's rows over the mean)", where,
                 i, f.dump());
    m.per_step.push_back(f.get<double>());
  }
  CLEAVE_CHECK(node.contains("source") && node.at("source").is_string() && !node.at("source").get<std::string>().empty(),
               "{}: needs a non-empty string 'source' (how the figure was measured)", where);
  m.source = node.at("source").get<std::string>();
  return m;
}

}  // namespace cleave::partition

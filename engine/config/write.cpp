// RunConfig -> JSON text (config.hpp, to_json()): every key in the documented order, enum values by their name
// tables, so parse_config(to_json(c)) == c. A model writes only its own type's keys.
#include <nlohmann/json.hpp>

#include <span>
#include <concepts>
#include <string>
#include <type_traits>
#include <variant>

#include "engine/config/config.hpp"
#include "engine/config/fields.hpp"

namespace cleave::config {
namespace {

using ordered_json = nlohmann::ordered_json;  // to_json keeps the documented key order

// An enum-valued key as the text its name table gives it.
template <NamedEnum E>
std::string text(E value) {
  return std::string(enum_name(value));
}

// Writes each key of `fields` into `j` in the table's order; enums by their names.
template <typename Section>
void write_fields(ordered_json& j, const Section& s, std::span<const Field<Section>> fields) {
  for (const Field<Section>& f : fields) {
    std::visit(
        [&](auto member) {
          const auto& value = s.*member;
          using T = std::remove_cvref_t<decltype(value)>;
          if constexpr (NamedEnum<T>) {
            j[std::string(f.key)] = text(value);
          } else if constexpr (std::same_as<T, std::optional<std::int64_t>>) {
            if (value) j[std::string(f.key)] = *value;  // unset keys are not written
          } else {
            j[std::string(f.key)] = value;
          }
        },
        f.member);
  }
}

template <typename Section, std::size_t N>
ordered_json write_section(const Section& s, const std::array<Field<Section>, N>& fields) {
  ordered_json j = ordered_json::object();
  write_fields<Section>(j, s, fields);
  return j;
}

ordered_json write_model(const ModelConfig& m) {
  ordered_json j = {{"type", text(m.type)}};
  ModelConfig resolved = m;  // an unresolved struct (built in code) is written as the reader would resolve it
  if (const auto resolve = partition::family(m.type).resolve) resolve(resolved);
  for_each_model_fields([&](const auto& row) {
    if (row.type == m.type) write_fields(j, resolved.*row.config, row.fields);
  });
  return j;
}

ordered_json to_json_tree(const RunConfig& c) {
  ordered_json j;
  j["model"] = write_model(c.model);
  const std::span<const Field<ParallelConfig>> parallel = kParallelFields;
  ordered_json& p = j["parallel"] = ordered_json::object();
  write_fields(p, c.parallel, parallel.first(kParallelPartitionAt));
  p["partition"] = write_section(c.parallel.partition, kPartitionFields);
  write_fields(p, c.parallel, parallel.subspan(kParallelPartitionAt));
  j["batch"] = write_section(c.batch, kBatchFields);
  j["optimizer"] = write_section(c.optimizer, kOptimizerFields);
  j["train"] = write_section(c.train, kTrainFields);
  j["checkpoint"] = write_section(c.checkpoint, kCheckpointFields);
  j["data"] = write_section(c.data, kDataFields);
  j["device"] = write_section(c.device, kDeviceFields);
  return j;
}

}  // namespace

std::string to_json(const RunConfig& config) { return to_json_tree(config).dump(2) + "\n"; }

}  // namespace cleave::config

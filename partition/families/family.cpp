// The model-family table (see family.hpp): every family and every family-owned block kind, listed once,
// explicitly. Adding a family adds its rows here.
#include "partition/families/family.hpp"

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "partition/block_work.hpp"
#include "partition/cost_model.hpp"
#include "partition/model_spec.hpp"

namespace cleave::partition {
namespace {

constexpr std::size_t kFamilies = enum_names(ModelType{}).size();

struct Tables {
  std::array<Family, kFamilies> families;
  std::vector<BlockRules> blocks;
};

// The rows, checked once against the invariants of family.hpp (a row that breaks them is a bug).
Tables make_tables() {
  Tables t{{gpt_family(), mlp_family(), cnn_family(), llama_family(), moe_family()},
           {transformer_block_rules(), llama_block_rules(), moe_block_rules()}};
  for (std::size_t i = 0; i < t.families.size(); ++i) {
    const Family& f = t.families[i];
    CLEAVE_ASSERT(static_cast<std::size_t>(f.type) == i && f.name == enum_name(f.type),
                  "family table row {} is '{}', expected '{}'", i, f.name, enum_name(static_cast<ModelType>(i)));
    CLEAVE_ASSERT(f.make_spec != nullptr, "family '{}' has no make_spec", f.name);
    CLEAVE_ASSERT(!f.blocks_are.empty() && !f.deeper_by.empty(), "family '{}' does not describe its blocks", f.name);
    CLEAVE_ASSERT(!f.language_model || f.token_sizes != nullptr, "language model family '{}' has no token_sizes",
                  f.name);
    CLEAVE_ASSERT((f.check_tensor_parallel == nullptr) == (f.tp_sizes == nullptr),
                  "family '{}' sets one of check_tensor_parallel and tp_sizes", f.name);
    CLEAVE_ASSERT(!f.sequence_parallel || (f.check_tensor_parallel != nullptr && f.token_sizes != nullptr),
                  "family '{}' allows sequence parallelism without tensor parallelism or token sizes", f.name);
  }
  for (const BlockRules& r : t.blocks) {
    CLEAVE_ASSERT(r.cost != nullptr && r.work != nullptr && r.tp_comm != nullptr && r.shape_key != nullptr &&
                      r.param_tensors != nullptr,
                  "block rules of '{}' leave a function unset", block_kind_name(r.kind));
  }
  return t;
}

const Tables& tables() {
  static const Tables t = make_tables();  // immutable after the first call
  return t;
}

}  // namespace

const Family& family(ModelType type) {
  const auto index = static_cast<std::size_t>(type);
  CLEAVE_ASSERT(index < kFamilies, "model type {} has no row in the family table", index);
  return tables().families[index];
}

std::span<const Family> families() { return tables().families; }

std::string family_names(bool (*has)(const Family&), std::string_view conjunction, bool quoted) {
  std::vector<std::string_view> names;
  for (const Family& f : families()) {
    if (has(f)) names.push_back(f.name);
  }
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? fmt::format(" {} ", conjunction) : std::string(", ");
    out += quoted ? fmt::format("\"{}\"", names[i]) : std::string(names[i]);
  }
  return out;
}

std::vector<NullGradient> null_gradients(const ModelSpec& spec) {
  std::vector<NullGradient> out;
  for (const BlockSpec& b : spec.blocks) {
    const BlockRules* rules = family_block_rules(b.kind);
    if (rules == nullptr || rules->null_gradients == nullptr) continue;
    for (NullGradient& n : rules->null_gradients(b)) out.push_back(std::move(n));
  }
  return out;
}

const BlockRules* family_block_rules(BlockKind kind) {
  for (const BlockRules& r : tables().blocks) {
    if (r.kind == kind) return &r;
  }
  return nullptr;
}

}  // namespace cleave::partition

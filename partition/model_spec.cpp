// ModelSpec's generic parts (see model_spec.hpp): the family's block list by type, the shared token sizes.
// Each family's builder and its checks are in partition/families/<family>.cpp.
#include "partition/model_spec.hpp"

#include "engine/core/error.hpp"

namespace cleave::partition {

ModelSpec make_model_spec(ModelType type, const FamilyConfigs& configs) { return family(type).make_spec(configs); }

ModelSpec::TokenSizes ModelSpec::token_sizes() const {
  const Family& f = family(type);
  CLEAVE_ASSERT(f.token_sizes != nullptr, "token_sizes of a {} model", enum_name(type));
  return f.token_sizes(*this);
}

}  // namespace cleave::partition

// Context-parallel size rules (see cp_rules.hpp).
#include "partition/cp_rules.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/core/error.hpp"

namespace cleave::partition {
namespace {

constexpr const char* kCpKey = "parallel.context_parallel_size";

struct Heads {
  std::int64_t q = 0, kv = 0;
};

Heads heads_of(const ModelSpec& spec) {
  for (const BlockSpec& b : spec.blocks) {
    if (b.n_heads > 0) return {b.n_heads, b.n_kv_heads > 0 ? b.n_kv_heads : b.n_heads};
  }
  return {};
}

// The first rule cp breaks, as a message without the key; empty when it keeps them all.
std::string broken_rule(const ModelSpec& spec, int tp, std::int64_t cp, bool ring, bool sp) {
  const std::int64_t seq_len = spec.token_sizes().seq_len;
  const std::int64_t chunks = ring ? 2 * cp : cp;
  if (seq_len % chunks != 0) {
    return ring ? fmt::format("{} with context_parallel_comm \"ring\" cuts each sequence into 2 × {} = {} chunks, "
                              "and model.seq_len {} is not divisible by {}",
                              cp, cp, chunks, seq_len, chunks)
                : fmt::format("{} with context_parallel_comm \"all_to_all\" cuts each sequence into {} chunks, and "
                              "model.seq_len {} is not divisible by {}",
                              cp, cp, seq_len, cp);
  }
  if (!ring) {
    const Heads h = heads_of(spec);
    const std::int64_t q = h.q / tp, kv = h.kv / tp;
    if (q % cp != 0 || kv % cp != 0) {
      return fmt::format("{} with context_parallel_comm \"all_to_all\" gives each cp rank heads / cp of the {} "
                         "query and {} kv heads per tp rank (model heads {} / {} over tp {}), which {} does not divide "
                         "(\"ring\" has no head rule)",
                         cp, q, kv, h.q, h.kv, tp, cp);
    }
  }
  if (sp && tp > 1 && (seq_len / cp) % tp != 0) {
    return fmt::format("{} leaves seq_len / cp = {} tokens per rank, which parallel.sequence_parallel cannot split "
                       "over tp {}",
                       cp, seq_len / cp, tp);
  }
  return {};
}

}  // namespace

bool has_attention(const ModelSpec& spec) { return heads_of(spec).q > 0 && is_language_model(spec.type); }

std::vector<std::int64_t> allowed_cp_sizes(const ModelSpec& spec, int tp_size, bool ring, bool sequence_parallel,
                                           std::int64_t limit) {
  std::vector<std::int64_t> out{1};
  if (!has_attention(spec)) return out;
  for (std::int64_t cp = 2; cp <= limit; ++cp) {
    if (broken_rule(spec, tp_size, cp, ring, sequence_parallel).empty()) out.push_back(cp);
  }
  return out;
}

void check_context_parallel(const ModelSpec& spec, int tp_size, int cp_size, bool ring, bool sequence_parallel) {
  CLEAVE_CHECK_KEY(cp_size >= 1, kCpKey, "must be >= 1, got {}", cp_size);
  if (cp_size == 1) return;
  CLEAVE_CHECK_KEY(has_attention(spec), kCpKey,
                   "{} splits sequences inside attention, and model.type {} has no attention; use 1", cp_size,
                   spec.type);
  const std::string broken = broken_rule(spec, tp_size, cp_size, ring, sequence_parallel);
  CLEAVE_CHECK_KEY(broken.empty(), kCpKey, "{}; use context_parallel_size in {{{}}}", broken,
                   fmt::join(allowed_cp_sizes(spec, tp_size, ring, sequence_parallel), ", "));
}

}  // namespace cleave::partition

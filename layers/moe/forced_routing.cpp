// Forced routing workloads (see forced_routing.hpp).
#include "layers/moe/forced_routing.hpp"

#include <algorithm>

#include "engine/core/error.hpp"

namespace cleave::layers {
namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  std::uint64_t z = x;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::uint64_t draw(std::int64_t step, std::int64_t token, std::int64_t slot) {
  return splitmix64((static_cast<std::uint64_t>(step) << 40) ^ (static_cast<std::uint64_t>(token) << 8) ^
                    static_cast<std::uint64_t>(slot));
}

std::int64_t zipf_pick(std::uint64_t value, const std::vector<std::uint64_t>& cumulative) {
  const std::uint64_t r = value % cumulative.back();
  return std::upper_bound(cumulative.begin(), cumulative.end(), r) - cumulative.begin();
}

}  // namespace

std::vector<std::int32_t> forced_experts(const partition::ForcedRouting& workload, std::int64_t step,
                                         std::int64_t tokens, std::int64_t experts, std::int64_t top_k) {
  using Kind = partition::ForcedRouting::Kind;
  if (workload.kind == Kind::kNone) return {};
  CLEAVE_ASSERT(experts > 0 && top_k > 0 && top_k <= experts && step >= 0 && tokens >= 0,
                "forced_experts: {} experts, top_k {}, step {}, {} tokens", experts, top_k, step, tokens);
  const std::int64_t span = workload.kind == Kind::kEmptyRank ? experts - experts / workload.parts : experts;
  CLEAVE_ASSERT(span >= top_k, "forced_experts: {} experts to choose {} from", span, top_k);
  std::vector<std::uint64_t> cumulative;  // zipf: 2^20 / (e + 1), summed
  if (workload.kind == Kind::kZipf) {
    std::uint64_t sum = 0;
    for (std::int64_t e = 0; e < experts; ++e) cumulative.push_back(sum += (std::uint64_t{1} << 20) / static_cast<std::uint64_t>(e + 1));
  }
  const auto e64 = static_cast<std::uint64_t>(experts), span64 = static_cast<std::uint64_t>(span);
  std::vector<std::int32_t> out(static_cast<std::size_t>(tokens * top_k));
  for (std::int64_t n = 0; n < tokens; ++n) {
    std::int32_t* chosen = out.data() + n * top_k;
    for (std::int64_t j = 0; j < top_k; ++j) {
      std::int64_t c = 0;
      switch (workload.kind) {
        case Kind::kUniform: c = static_cast<std::int64_t>(draw(step, n, j) % e64); break;
        case Kind::kZipf: c = zipf_pick(draw(step, n, j), cumulative); break;
        case Kind::kOneExpert: c = j; break;
        case Kind::kEmptyRank: c = static_cast<std::int64_t>(draw(step, n, j) % span64); break;
        case Kind::kMovingHot: c = j == 0 ? step % experts : static_cast<std::int64_t>(draw(step, n, j) % e64); break;
        case Kind::kNone: break;
      }
      while (std::find(chosen, chosen + j, static_cast<std::int32_t>(c)) != chosen + j) c = (c + 1) % span;
      chosen[j] = static_cast<std::int32_t>(c);
    }
  }
  return out;
}

}  // namespace cleave::layers

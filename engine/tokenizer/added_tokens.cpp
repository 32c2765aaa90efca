// Added-token matching (see added_tokens.hpp).
#include "engine/tokenizer/added_tokens.hpp"

#include <algorithm>

#include "engine/core/error.hpp"

namespace cleave::tokenizer {

void AddedTokenMatcher::add(std::string content, std::int32_t id) {
  CLEAVE_ASSERT(!content.empty(), "AddedTokenMatcher::add: empty content for id {}", id);
  tokens_.push_back({std::move(content), id});
  std::stable_sort(tokens_.begin(), tokens_.end(),
                   [](const Entry& a, const Entry& b) { return a.content.size() > b.content.size(); });
  for (auto& list : by_first_byte_) list.clear();
  for (std::uint32_t i = 0; i < tokens_.size(); ++i) {
    by_first_byte_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(i);
  }
}

std::optional<AddedTokenMatcher::Match> AddedTokenMatcher::find(std::string_view text, std::size_t from) const {
  if (tokens_.empty()) return std::nullopt;
  for (std::size_t p = from; p < text.size(); ++p) {
    const auto& candidates = by_first_byte_[static_cast<unsigned char>(text[p])];
    for (std::uint32_t i : candidates) {
      const std::string& c = tokens_[i].content;
      if (text.size() - p >= c.size() && text.compare(p, c.size(), c) == 0) return Match{p, p + c.size(), tokens_[i].id};
    }
  }
  return std::nullopt;
}

}  // namespace cleave::tokenizer

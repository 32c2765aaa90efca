// tokenizer.json's post_processor (tokenizer_json_parts.hpp): the special-token ids TemplateProcessing, Roberta-
// or BertProcessing put around one sequence (ByteLevel adds none). Invariant: a template holds exactly one sequence
// ($A), and every special token it names has its ids in special_tokens.
#include "engine/tokenizer/tokenizer_json_parts.hpp"

#include <cstdint>
#include <limits>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/error.hpp"

namespace cleave::tokenizer::json_parts {
namespace {

std::vector<std::int32_t> special_ids(const json& specials, const std::string& name, const std::string& where,
                                      const std::string& src) {
  const auto it = specials.is_object() ? specials.find(name) : specials.end();
  CLEAVE_CHECK(it != specials.end() && it->is_object() && it->contains("ids") && (*it)["ids"].is_array(),
               "{}: {}.single names special token \"{}\", but {}.special_tokens has no \"{}\" with \"ids\"", src,
               where, name, where, name);
  std::vector<std::int32_t> ids;
  for (const json& id : (*it)["ids"]) {
    CLEAVE_CHECK(id.is_number_unsigned() && id.get<std::uint64_t>() < std::numeric_limits<std::int32_t>::max(),
                 "{}: {}.special_tokens[\"{}\"].ids holds {}; expected ids", src, where, name, shown(id));
    ids.push_back(static_cast<std::int32_t>(id.get<std::uint64_t>()));
  }
  return ids;
}

}  // namespace

// The ids a post-processor puts around one sequence (TemplateProcessing "single", Roberta/Bert's cls and sep).
void read_post_processor(const json& p, const std::string& where, TokenizerSpec& spec) {
  const std::string& src = spec.source;
  if (p.is_null()) return;
  const std::string type = type_of(p, where, src);
  if (type == "Sequence") {
    const json& list = member(p, "processors", where, src);
    CLEAVE_CHECK(list.is_array(), "{}: {}.processors is {}; expected an array", src, where, shown(list));
    for (std::size_t i = 0; i < list.size(); ++i) read_post_processor(list[i], fmt::format("{}.processors[{}]", where, i), spec);
  } else if (type == "ByteLevel") {  // offsets only
  } else if (type == "TemplateProcessing") {
    const json& single = member(p, "single", where, src);
    const json& specials = member(p, "special_tokens", where, src);
    CLEAVE_CHECK(single.is_array(), "{}: {}.single is {}; expected an array", src, where, shown(single));
    bool seen_sequence = false;
    for (const json& piece : single) {
      if (piece.is_object() && piece.contains("Sequence")) {
        CLEAVE_CHECK(!seen_sequence, "{}: {}.single has two sequences; expected one ($A)", src, where);
        seen_sequence = true;
        continue;
      }
      const auto token = piece.is_object() ? piece.find("SpecialToken") : piece.end();
      CLEAVE_CHECK(token != piece.end() && token->is_object() && token->contains("id") && (*token)["id"].is_string(),
                   "{}: {}.single holds {}; expected {{\"SpecialToken\": {{\"id\": ...}}}} or {{\"Sequence\": ...}}", src,
                   where, shown(piece));
      const auto ids = special_ids(specials, (*token)["id"].get<std::string>(), where, src);
      auto& side = seen_sequence ? spec.template_suffix : spec.template_prefix;
      side.insert(side.end(), ids.begin(), ids.end());
    }
    CLEAVE_CHECK(seen_sequence, "{}: {}.single has no {{\"Sequence\": ...}} ($A)", src, where);
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    for (const char* key : {"cls", "sep"}) {
      const json& pair = member(p, key, where, src);
      CLEAVE_CHECK(pair.is_array() && pair.size() == 2 && pair[1].is_number_unsigned(),
                   "{}: {}.{} is {}; expected [token, id]", src, where, key, shown(pair));
      (std::string_view(key) == "cls" ? spec.template_prefix : spec.template_suffix)
          .push_back(static_cast<std::int32_t>(pair[1].get<std::uint64_t>()));
    }
  } else {
    CLEAVE_THROW("{}: {}.type is \"{}\"; cleave supports the post-processors TemplateProcessing, ByteLevel, "
                 "RobertaProcessing, BertProcessing, Sequence of them, or null", src, where, type);
  }
}

}  // namespace cleave::tokenizer::json_parts

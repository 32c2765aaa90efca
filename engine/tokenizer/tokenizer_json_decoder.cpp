// tokenizer.json's decoder (tokenizer_json_parts.hpp): ByteLevel for a byte-level tokenizer; Metaspace, Replace,
// ByteFallback, Fuse, Strip and Sequence of them for a SentencePiece-style one. Invariant: the decoder matches the
// pre-tokenizer's kind, so decoding undoes what encoding did.
#include "engine/tokenizer/tokenizer_json_parts.hpp"

#include <nlohmann/json.hpp>

#include "engine/core/error.hpp"

namespace cleave::tokenizer::json_parts {

void read_decoder(const json& d, const std::string& where, TokenizerSpec& spec) {
  const std::string& src = spec.source;
  const std::string type = type_of(d, where, src);
  const bool byte_level = spec.kind == TokenizerKind::kByteLevel;
  if (byte_level) {
    CLEAVE_CHECK(type == "ByteLevel", "{}: {}.type is \"{}\" with a ByteLevel pre-tokenizer; cleave supports the "
                 "ByteLevel decoder there. {}", src, where, type, kSupported);
    return;
  }
  if (type == "Sequence") {
    const json& list = member(d, "decoders", where, src);
    CLEAVE_CHECK(list.is_array(), "{}: {}.decoders is {}; expected an array", src, where, shown(list));
    for (std::size_t i = 0; i < list.size(); ++i) read_decoder(list[i], fmt::format("{}.decoders[{}]", where, i), spec);
  } else if (type == "Metaspace") {
    spec.decode_space = read_replacement(d, where, src);
    spec.decode_strip_space = read_prepend_scheme(d, where, src) != PrependScheme::kNever;
  } else if (type == "Replace") {
    const json& pattern = member(d, "pattern", where, src);
    const auto string = pattern.is_object() ? pattern.find("String") : pattern.end();
    const auto content = d.find("content");
    CLEAVE_CHECK(string != pattern.end() && string->is_string() && !string->get<std::string>().empty() &&
                     content != d.end() && *content == " ",
                 "{}: {} is {}; cleave supports a Replace decoder of a String pattern by \" \" (\"\u2581\" -> \" \")",
                 src, where, shown(d));
    spec.decode_space = string->get<std::string>();
  } else if (type == "ByteFallback") {
    spec.decode_byte_fallback = true;
  } else if (type == "Fuse") {
  } else if (type == "Strip") {
    const auto content = d.find("content");
    const auto start = d.find("start");
    const auto stop = d.find("stop");
    CLEAVE_CHECK(content != d.end() && *content == " " && start != d.end() && start->is_number_unsigned() &&
                     start->get<std::uint64_t>() <= 1 && (stop == d.end() || *stop == 0),
                 "{}: {} is {}; cleave supports Strip of at most one leading \" \" (content \" \", start 0 or 1, stop 0)",
                 src, where, shown(d));
    spec.decode_strip_space = start->get<std::uint64_t>() == 1;
  } else {
    CLEAVE_THROW("{}: {}.type is \"{}\"; cleave supports, for a SentencePiece-style tokenizer, the decoders "
                 "Metaspace, Replace, ByteFallback, Fuse, Strip and Sequence of them", src, where, type);
  }
}

}  // namespace cleave::tokenizer::json_parts

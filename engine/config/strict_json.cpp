// Strict JSON reading (see strict_json.hpp).
#include "engine/config/strict_json.hpp"

#include <fmt/format.h>

#include <set>
#include <vector>

#include "engine/core/error.hpp"

namespace cleave::config {
namespace {
using json = nlohmann::json;
}  // namespace

std::string join_path(const std::string& parent, std::string_view key) {
  return parent.empty() ? std::string(key) : parent + "." + std::string(key);
}

// Parses strict JSON; a key repeated within one object is an error naming its path (nlohmann would keep
// the last silently). Malformed text reports line and column.
json parse_json_strict(std::string_view text, const std::string& what) {
  struct Frame {
    bool is_object = true;
    std::set<std::string> keys;
    std::string current;  // current key (objects)
    std::size_t index = 0;  // current element (arrays)
  };
  std::vector<Frame> frames;
  auto path_of = [&](std::size_t depth) {  // location of frames[depth]'s current child
    std::string path;
    for (std::size_t i = 0; i <= depth && i < frames.size(); ++i) {
      if (frames[i].is_object) path = join_path(path, frames[i].current);
      else path += fmt::format("[{}]", frames[i].index);
    }
    return path;
  };
  auto element_done = [&] {
    if (!frames.empty() && !frames.back().is_object) ++frames.back().index;
  };
  json::parser_callback_t callback = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start: frames.push_back(Frame{true, {}, {}, 0}); break;
      case json::parse_event_t::array_start: frames.push_back(Frame{false, {}, {}, 0}); break;
      case json::parse_event_t::key: {
        Frame& frame = frames.back();
        frame.current = parsed.get<std::string>();
        if (!frame.keys.insert(frame.current).second) {
          throw Error(fmt::format("{}: duplicate key {} (JSON keeps only the last value; remove one of them)", what,
                                  path_of(frames.size() - 1)));
        }
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames.pop_back();
        element_done();
        break;
      case json::parse_event_t::value: element_done(); break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const json::parse_error& e) {
    // nlohmann's text is "[json.exception.parse_error.101] parse error at line L, column C: detail".
    std::string detail = e.what();
    if (auto at = detail.find(" at line "); at != std::string::npos) detail = detail.substr(at + 1);
    else if (auto colon = detail.find("] "); colon != std::string::npos) detail = detail.substr(colon + 2);
    throw Error(fmt::format("{}: malformed JSON {}", what, detail));
  } catch (const json::exception& e) {
    // Anything else the library raises on text (a number beyond a double, 406) is bad input too: one line,
    // without the library's "[json.exception...]" prefix.
    std::string detail = e.what();
    if (auto colon = detail.find("] "); colon != std::string::npos) detail = detail.substr(colon + 2);
    throw Error(fmt::format("{}: {} (numbers must fit a double: |x| < 1.8e308)", what, detail));
  }
}

// Offset of the first byte that is not part of well-formed UTF-8 (no overlong forms, no surrogates, at most
// U+10FFFF), or npos. JSON strings must be UTF-8: a --set value taken as text is checked here, so nothing
// later (to_json, messages) meets bytes the JSON library refuses to write.
std::size_t invalid_utf8_at(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
    const unsigned char c = byte(i);
    std::size_t length = 0;
    unsigned char low = 0x80, high = 0xbf;  // allowed range of the second byte
    if (c < 0x80) length = 1;
    else if (c >= 0xc2 && c <= 0xdf) length = 2;
    else if (c >= 0xe0 && c <= 0xef) length = 3, low = c == 0xe0 ? 0xa0 : 0x80, high = c == 0xed ? 0x9f : 0xbf;
    else if (c >= 0xf0 && c <= 0xf4) length = 4, low = c == 0xf0 ? 0x90 : 0x80, high = c == 0xf4 ? 0x8f : 0xbf;
    else return i;
    if (i + length > text.size()) return i;
    for (std::size_t k = 1; k < length; ++k) {
      const unsigned char lo = k == 1 ? low : 0x80, hi = k == 1 ? high : 0xbf;
      if (byte(i + k) < lo || byte(i + k) > hi) return i;
    }
    i += length;
  }
  return std::string_view::npos;
}

}  // namespace cleave::config

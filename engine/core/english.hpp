// Numbers and names inside user-facing messages read as English: "1 rank" and "2 ranks", "a gpt model" and "an mlp
// model". Messages build these here instead of writing "{} ranks" or "a {}" around a value that may be 1 or may be
// read with a vowel sound.
//
// Invariant: pure functions of their arguments. The article follows how a name is read: a name read letter by letter
// (an initialism: mlp, moe, f16, i32, u16, cnn) takes "an" when its first letter's name begins with a vowel sound (a,
// e, f, h, i, l, m, n, o, r, s, x; not u, "you"); a name read as a word (llama, cuda, cpu) takes "an" when it begins
// with a vowel letter. A name is an initialism when no vowel letter follows its first character, or it is "moe".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace cleave {

// "1 rank", "0 ranks", "3 ranks"; `plural` when the noun's plural is not noun + "s" ("1 entry", "2 entries").
std::string count_of(std::int64_t n, std::string_view noun, std::string_view plural = {});

// "a gpt", "an mlp", "an moe", "a llama", "an f32", "a bf16": `name` after the article it is read with.
std::string with_article(std::string_view name);

}  // namespace cleave

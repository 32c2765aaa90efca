// Reading tokenizer.json: every unsupported or malformed input is refused with one Error that names the file,
// the JSON key and what is supported (model types other than BPE, non-byte-level BPE, other patterns and
// pre-tokenizers, normalizers, decoders, malformed merges and vocabularies, a missing file, bad JSON).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "engine/core/error.hpp"
#include "engine/tokenizer/tokenizer_json.hpp"
#include "unit/tokenizer/tiny_tokenizer.hpp"

namespace cleave::tokenizer::tokenizer_json_test {
namespace {

using nlohmann::json;
using testing::tiny_tokenizer_json;

// The message of the Error that building a Tokenizer from `j` throws ("" when it does not throw).
std::string refusal(const json& j) {
  try {
    Tokenizer tok(parse_tokenizer_json(j.dump(), "tokenizer bad.json"));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_refused(const std::function<void(json&)>& edit, std::initializer_list<const char*> fragments) {
  json j = tiny_tokenizer_json();
  edit(j);
  const std::string message = refusal(j);
  ASSERT_FALSE(message.empty()) << "accepted: " << j.dump().substr(0, 200);
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_NE(message.find("tokenizer bad.json"), std::string::npos) << message;
  for (const char* f : fragments) EXPECT_NE(message.find(f), std::string::npos) << "'" << f << "' not in: " << message;
}

TEST(TokenizerJson, TheTinyFileIsAccepted) { EXPECT_EQ(refusal(tiny_tokenizer_json()), ""); }

TEST(TokenizerJson, RefusesOtherModelTypes) {
  for (const char* type : {"WordPiece", "Unigram", "WordLevel"}) {
    expect_refused([&](json& j) { j["model"]["type"] = type; }, {"model.type", type, "BPE tokenizers", "byte-level", "SentencePiece-style"});
  }
  expect_refused([](json& j) { j["model"].erase("type"); }, {"model", "\"type\""});
}

TEST(TokenizerJson, RefusesWhatNeitherKindHas) {
  expect_refused([](json& j) { j["model"]["byte_fallback"] = true; }, {"model.byte_fallback", "SentencePiece"});
  expect_refused([](json& j) { j["model"]["continuing_subword_prefix"] = "##"; }, {"model.continuing_subword_prefix"});
  expect_refused([](json& j) { j["model"]["end_of_word_suffix"] = "</w>"; }, {"model.end_of_word_suffix"});
  expect_refused([](json& j) { j["model"]["dropout"] = 0.1; }, {"model.dropout"});
  expect_refused([](json& j) { j["model"]["vocab"].erase("\xC4\x8A"); }, {"byte 0x0a", "not a byte-level vocabulary"});
  expect_refused([](json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }, {"pre_tokenizer.type", "Whitespace"});
  // Metaspace or no pre-tokenizer makes a SentencePiece-style tokenizer, whose decoder cannot be ByteLevel.
  expect_refused([](json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}}; },
                 {"decoder.type", "ByteLevel", "SentencePiece-style"});
  expect_refused([](json& j) { j["pre_tokenizer"] = nullptr; }, {"decoder.type", "ByteLevel"});
  expect_refused([](json& j) { j["pre_tokenizer"]["use_regex"] = false; }, {"pre_tokenizer.use_regex"});
  expect_refused([](json& j) { j["decoder"] = {{"type", "WordPiece"}}; }, {"decoder.type", "WordPiece"});
  expect_refused([](json& j) { j["normalizer"] = {{"type", "Precompiled"}}; }, {"normalizer", "Precompiled", "null"});
}

TEST(TokenizerJson, RefusesOtherSplitPatterns) {
  const auto with_split = [](json split) {
    return [split](json& j) {
      json byte_level = j["pre_tokenizer"];
      byte_level["use_regex"] = false;
      j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({split, byte_level})}};
    };
  };
  const std::string qwen = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  expect_refused(with_split({{"type", "Split"}, {"pattern", {{"Regex", qwen}}}, {"behavior", "Isolated"}, {"invert", false}}),
                 {"pre_tokenizer.pretokenizers[0].pattern.Regex", "exactly these two patterns", "GPT-2", "Llama 3"});
  expect_refused(with_split({{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Isolated"}, {"invert", false}}),
                 {"pre_tokenizer.pretokenizers[0].pattern"});
  expect_refused(with_split({{"type", "Split"}, {"pattern", {{"Regex", testing::llama3_regex()}}},
                             {"behavior", "Removed"}, {"invert", false}}),
                 {"pre_tokenizer.pretokenizers[0].behavior", "Isolated"});
  expect_refused(with_split({{"type", "Digits"}, {"individual_digits", true}}), {"pre_tokenizer.pretokenizers", "[Digits, ByteLevel]"});
  // The accepted form, for contrast: the same edit with the Llama 3 pattern.
  json ok = tiny_tokenizer_json();
  with_split({{"type", "Split"}, {"pattern", {{"Regex", testing::llama3_regex()}}}, {"behavior", "Isolated"},
              {"invert", false}})(ok);
  EXPECT_EQ(refusal(ok), "");
}

TEST(TokenizerJson, RefusesMalformedMergesAndVocabulary) {
  expect_refused([](json& j) { j["model"]["merges"][3] = "in"; }, {"model.merges[3]", "\"a b\""});
  expect_refused([](json& j) { j["model"]["merges"][2] = 7; }, {"model.merges[2]", "[\"a\", \"b\"]"});
  expect_refused([](json& j) { j["model"]["merges"][1] = json::array({"h"}); }, {"model.merges[1]"});
  expect_refused([](json& j) { j["model"]["merges"][0] = "q zz"; }, {"model.merges[0]", "\"zz\" is not in model.vocab"});
  expect_refused([](json& j) { j["model"]["merges"].push_back("x y"); }, {"model.merges[12]", "\"xy\" is not in model.vocab"});
  expect_refused([](json& j) { j["model"]["merges"] = "a b"; }, {"model.merges is"});
  expect_refused([](json& j) { j["model"]["vocab"]["zz"] = -3; }, {"model.vocab[\"zz\"]"});
  expect_refused([](json& j) { j["model"]["vocab"]["zz"] = 97; }, {"id 97 to two tokens"});
  expect_refused([](json& j) { j["added_tokens"][0]["lstrip"] = true; }, {"added_tokens[0].lstrip"});
  expect_refused([](json& j) { j["added_tokens"][0]["content"] = ""; }, {"added_tokens[0].content"});
  // `tokenizers` ignores an added token's id and takes the next after the vocabulary (269 here), so a file
  // saying otherwise would encode differently there.
  expect_refused([](json& j) { j["added_tokens"][0]["id"] = 500; }, {"added_tokens[0]", "has id 500", "gives it id 269"});
  expect_refused([](json& j) { j["added_tokens"][0]["content"] = "abc"; }, {"added_tokens[0]", "gives it id 268",
                                                                            "its id in model.vocab"});
  // A vocabulary with a gap (268 unused) gives the added token an id the vocabulary already holds.
  expect_refused([](json& j) { j["model"]["vocab"]["abc"] = 269; }, {"added_tokens[0]", "has id 269",
                                                                      "which model.vocab gives to \"abc\""});
}

TEST(TokenizerJson, RefusesMissingFilesAndBadJson) {
  const auto dir = std::filesystem::temp_directory_path() / "cleave_tokenizer_json_test";
  std::filesystem::create_directories(dir);
  const std::string missing = (dir / "missing.json").string();
  try {
    read_tokenizer_json(missing);
    FAIL() << "a missing file was read";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "tokenizer " + missing + ": no such file");
  }
  const std::string broken = (dir / "broken.json").string();
  std::ofstream(broken) << "{\"model\": ";
  try {
    read_tokenizer_json(broken);
    FAIL() << "broken JSON was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos) << e.what();
  }
  const std::string good = (dir / "tokenizer.json").string();
  std::ofstream(good) << tiny_tokenizer_json().dump();
  Tokenizer tok = read_tokenizer_json(good);
  EXPECT_EQ(tok.encode("hello"), (std::vector<std::int32_t>{262, 111}));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cleave::tokenizer::tokenizer_json_test

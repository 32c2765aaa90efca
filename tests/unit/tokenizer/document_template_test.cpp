// BOS/EOS per document (document_template.hpp): tokenizer_config.json's add_bos_token/add_eos_token decide when
// present (bos_token as a string or {"content": ...}), else the tokenizer.json post_processor's template; a token
// the config names that the tokenizer lacks, a missing bos_token and bad JSON are refused naming the file.
#include <gtest/gtest.h>

#include "engine/core/error.hpp"
#include "engine/tokenizer/document_template.hpp"
#include "engine/tokenizer/tokenizer_json.hpp"
#include "unit/tokenizer/tiny_tokenizer.hpp"

namespace cleave::tokenizer::document_template_test {
namespace {

using Ids = std::vector<std::int32_t>;

Tokenizer tiny(bool with_template) {
  nlohmann::json j = testing::tiny_tokenizer_json();
  if (with_template) {
    j["post_processor"] = {{"type", "TemplateProcessing"},
                           {"single", {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                       {{"SpecialToken", {{"id", "<|endoftext|>"}, {"type_id", 0}}}}}},
                           {"special_tokens", {{"<|endoftext|>", {{"id", "<|endoftext|>"}, {"ids", {269}}}}}}};
  }
  return Tokenizer(parse_tokenizer_json(j.dump(), "tokenizer tiny.json"));
}

std::string error_of(const Tokenizer& tok, const std::string& config) {
  try {
    (void)document_template(tok, config, "dir/tokenizer_config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DocumentTemplate, ConfigFlagsWinOverThePostProcessor) {
  const Tokenizer plain = tiny(false), templated = tiny(true);
  EXPECT_EQ(document_template(plain, "", "c.json").before, Ids{});
  EXPECT_EQ(document_template(templated, "", "c.json").after, Ids{269});  // "$A <|endoftext|>"
  EXPECT_EQ(document_template(templated, "", "c.json").before, Ids{});
  const auto bos = document_template(templated, R"({"add_bos_token": true, "bos_token": "<|endoftext|>"})", "c.json");
  EXPECT_EQ(bos.before, Ids{269});
  EXPECT_EQ(bos.after, Ids{});  // the config decided: the template's suffix is not added
  EXPECT_NE(bos.source.find("add_bos_token true, add_eos_token false"), std::string::npos) << bos.source;
  const auto both = document_template(
      plain, R"({"add_bos_token": false, "add_eos_token": true, "eos_token": {"content": "<|endoftext|>"}})", "c.json");
  EXPECT_EQ(both.before, Ids{});
  EXPECT_EQ(both.after, Ids{269});
  // Neither flag: the post_processor decides even when other keys are present.
  EXPECT_EQ(document_template(templated, R"({"model_max_length": 4096})", "c.json").after, Ids{269});
}

TEST(DocumentTemplate, RefusesNamesTheTokenizerLacks) {
  const Tokenizer tok = tiny(false);
  const std::string unknown = error_of(tok, R"({"add_bos_token": true, "bos_token": "<s>"})");
  EXPECT_NE(unknown.find("dir/tokenizer_config.json: bos_token \"<s>\" is not an added token of tokenizer tiny.json"),
            std::string::npos) << unknown;
  const std::string missing = error_of(tok, R"({"add_eos_token": true, "eos_token": "<|endoftext|>"})");
  EXPECT_NE(missing.find("bos_token is missing, but add_bos_token is true"), std::string::npos) << missing;
  EXPECT_NE(error_of(tok, "{not json").find("dir/tokenizer_config.json: not valid JSON"), std::string::npos);
  EXPECT_NE(error_of(tok, R"({"add_bos_token": "yes"})").find("add_bos_token is \"yes\""), std::string::npos);
}

}  // namespace
}  // namespace cleave::tokenizer::document_template_test

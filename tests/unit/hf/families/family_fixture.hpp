// Shared pieces of the Hugging Face family tests (tests/unit/hf/families/*_test.cpp), beside hf_fixture.hpp's
// fixtures (and its add_llama_attention, one llama-like decoder layer's attention and norm tensors): the
// import -> export -> import round trip every family test makes (the second import must equal the first: model section and every tensor bit for bit), the check that a
// stacked expert tensor holds each expert's tensor row block for row block, and the error text of a call that
// should throw. A family's own fixture (config.json keys, its MLP or mixture tensors) stays in its test file.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>

#include "engine/core/error.hpp"
#include "engine/hf/hf_export.hpp"
#include "engine/hf/hf_import.hpp"
#include "unit/hf/hf_fixture.hpp"

namespace cleave::hf::testing {

// The text of the Error `fn` throws, or "(no error)".
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

inline void expect_contains(const std::string& text, const std::string& want) {
  EXPECT_NE(text.find(want), std::string::npos) << "'" << want << "' not in: " << text;
}

// `f` written in `shards` files and imported; exported (f32, one 4 KiB shard limit) and imported again, which must
// give the first import's model section and tensors bit for bit. Both directories are removed.
struct RoundTrip {
  HfCheckpoint imported;
  nlohmann::json exported_config;  // the export's config.json
};
inline RoundTrip expect_round_trip(const HfFixture& f, const std::string& name, int shards = 1) {
  const std::filesystem::path dir = fresh_dir(name), out = fresh_dir(name + "_out");
  f.write(dir, shards);
  RoundTrip rt;
  rt.imported = read_hf_checkpoint(dir.string());
  const HfCheckpoint& ck = rt.imported;
  write_hf_checkpoint(out.string(), ck.config.model, [&](const std::string& n) { return ck.tensors.at(n); },
                      {.bf16 = false, .max_shard_bytes = 4096, .source = {}});
  rt.exported_config = nlohmann::json::parse(std::ifstream(out / "config.json"));
  const HfCheckpoint back = read_hf_checkpoint(out.string());
  EXPECT_EQ(back.config.model, ck.config.model);
  EXPECT_EQ(back.tensors, ck.tensors);  // bit for bit
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(out);
  return rt;
}

// Row block j of Cleave's stacked tensor `stacked` ([E, ...]) is the fixture's tensor `expert(j)`, for each of the
// `experts` experts.
inline void expect_stacked_rows(const HfCheckpoint& ck, const std::string& stacked, const HfFixture& f,
                                const std::function<std::string(int)>& expert, int experts) {
  const std::vector<float>& all = ck.tensors.at(stacked);
  for (int j = 0; j < experts; ++j) {
    const auto& one = f.tensors.at(expert(j)).values;
    ASSERT_LE(static_cast<std::size_t>(j + 1) * one.size(), all.size()) << stacked;
    EXPECT_TRUE(std::equal(one.begin(), one.end(), all.begin() + static_cast<std::ptrdiff_t>(j * one.size())))
        << stacked << " row block " << j << " is not " << expert(j);
  }
}

}  // namespace cleave::hf::testing

// The strict index.json reader: a valid index reads into typed fields; each damaged field (missing, wrong type,
// out of range, a piece naming an unlisted file or more elements than the file holds, a file name that is a
// path, a shape whose element count overflows) is one Error line naming the file, the JSON path and the value.
// Cases marked "fuzz" came from tests/fuzz/checkpoint_index_fuzz.cpp's contract.
#include <functional>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/checkpoint/checkpoint_damage.hpp"
#include "engine/checkpoint/checkpoint_index.hpp"
#include "engine/core/error.hpp"

namespace cleave::checkpoint::checkpoint_index_test {
namespace {

using nlohmann::json;

json valid_index() {
  return json::parse(R"({
    "format": "cleave-checkpoint", "version": 1, "step": 7, "model": {"type": "gpt"},
    "optimizer": {"type": "adamw", "steps_done": 7},
    "files": {"rank_00000.safetensors": {"bytes": 400, "checksum": "fnv1a64:0123456789abcdef"}},
    "tensors": {
      "w": {"kind": "parameter", "shape": [4, 3], "dtype": "F32", "pieces": [
        {"file": "rank_00000.safetensors", "name": "w", "dim": 0, "parts": 2, "index": 0, "groups": 1, "begin": 0, "end": 6},
        {"file": "rank_00000.safetensors", "name": "w1", "dim": 0, "parts": 2, "index": 1, "groups": 1, "begin": 0, "end": 6}]},
      "b": {"kind": "optimizer_state", "shape": [], "dtype": "F32", "pieces": [
        {"file": "rank_00000.safetensors", "name": "b", "dim": -1, "parts": 1, "index": 0, "groups": 1, "begin": 0, "end": 1}]}
    }})");
}

// The message of the Error parsing `index` throws; fails the test when it parses or the message spans lines.
std::string error_of(const json& index) {
  try {
    (void)parse_checkpoint_index(index.dump(), "ck/index.json");
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    return message;
  }
  ADD_FAILURE() << "accepted: " << index.dump();
  return {};
}

// valid_index() with one change applied.
json with(const std::function<void(json&)>& change) {
  json index = valid_index();
  change(index);
  return index;
}

TEST(CheckpointIndex, ValidIndexReadsIntoFields) {
  const CheckpointIndex index = parse_checkpoint_index(valid_index().dump(), "ck/index.json");
  EXPECT_EQ(index.step, 7);
  EXPECT_EQ(index.optimizer_type, "adamw");
  EXPECT_EQ(index.steps_done, 7);
  EXPECT_EQ(index.files.at("rank_00000.safetensors").bytes, 400);
  const IndexTensor& w = index.tensors.at("w");
  EXPECT_EQ(w.kind, IndexTensorKind::kParameter);
  EXPECT_EQ(index.tensors.at("b").kind, IndexTensorKind::kOptimizerState);
  EXPECT_EQ(w.shape, (std::vector<std::int64_t>{4, 3}));
  ASSERT_EQ(w.pieces.size(), 2u);
  EXPECT_EQ(w.pieces[1].name, "w1");
  EXPECT_EQ(w.pieces[1].index, 1);
  EXPECT_EQ(w.pieces[1].end, 6);
  EXPECT_TRUE(index.tensors.at("b").shape.empty());
  EXPECT_EQ(index.document.at("model").at("type"), "gpt");
}

TEST(CheckpointIndex, NotJsonOrNotACheckpoint) {
  try {
    (void)parse_checkpoint_index("{\"format\": ", "ck/index.json");
    FAIL() << "accepted truncated JSON";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("checkpoint index ck/index.json: does not parse (parse error at line 1"), std::string::npos) << m;
    EXPECT_EQ(m.find("[json.exception"), std::string::npos) << m;
  }
  EXPECT_NE(error_of(json::array()).find("ck/index.json: the top level: expected an object, got []"), std::string::npos);
  EXPECT_NE(error_of(with([](json& j) { j["version"] = 3; })).find("is not a cleave checkpoint of format version 1 or 2"),
            std::string::npos);
  EXPECT_NE(error_of(with([](json& j) { j.erase("format"); })).find("format: missing"), std::string::npos);
}

// Version 2 carries the index's own checksum (seal_index): it reads back; any changed value, a missing checksum
// and a version-2 index passed off as version 1 are refused as damage.
TEST(CheckpointIndex, SealedIndexVerifiesItsOwnChecksum) {
  json sealed = with([](json& j) { j["version"] = 2; j["next_lr"] = 0.0029999999999999996; j["rng"] = {{"seed", 9}}; });
  seal_index(sealed);
  EXPECT_EQ(parse_checkpoint_index(sealed.dump(1), "ck/index.json").step, 7);
  json changed = sealed;
  changed["optimizer"]["steps_done"] = 6;
  EXPECT_NE(error_of(changed).find("index_checksum: \"fnv1a64:"), std::string::npos) << error_of(changed);
  EXPECT_NE(error_of(changed).find("does not match the index's content"), std::string::npos);
  json unsealed = sealed;
  unsealed.erase("index_checksum");
  EXPECT_NE(error_of(unsealed).find("index_checksum: missing"), std::string::npos);
  EXPECT_THROW((void)parse_checkpoint_index(changed.dump(), "ck/index.json"), CheckpointDamage);
}

// Every single flipped bit of a sealed index.json is refused as damage, unless it leaves the document as it was
// (whitespace into whitespace): the index checksum covers the step, the consumed samples, the rng and optimizer
// state, and every file's and chunk's checksum.
TEST(CheckpointIndex, EveryFlippedBitIsDamageOrHarmless) {
  json sealed = with([](json& j) {
    j["version"] = 2;
    j["consumed_samples"] = 56;
    j["next_lr"] = 0.0025;
    j["rng"] = {{"seed", 9}, {"next_step", 7}};
    j["files"]["rank_00000.safetensors"]["header_checksum"] = "fnv1a64:00000000000000ff";
  });
  seal_index(sealed);
  const std::string text = sealed.dump(1);
  const json original = json::parse(text);
  int refused = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string flipped = text;
      flipped[i] = static_cast<char>(flipped[i] ^ (1 << bit));
      try {
        const CheckpointIndex index = parse_checkpoint_index(flipped, "ck/index.json");
        ASSERT_EQ(index.document, original) << "byte " << i << " bit " << bit << " changed the index unnoticed";
      } catch (const CheckpointDamage&) {
        ++refused;
      }
    }
  }
  EXPECT_GT(refused, static_cast<int>(text.size()) * 6);  // almost every flip; the rest are whitespace
}

TEST(CheckpointIndex, FieldsNameTheirPath) {  // fuzz: each was a json::type_error / out_of_range before
  EXPECT_NE(error_of(with([](json& j) { j["step"] = "7"; })).find("step: expected an integer, got \"7\""),
            std::string::npos);
  EXPECT_NE(error_of(with([](json& j) { j["step"] = -1; })).find("step: -1 is outside [0, 9223372036854775807]"),
            std::string::npos);
  EXPECT_NE(error_of(with([](json& j) { j["optimizer"].erase("type"); })).find("optimizer.type: missing"),
            std::string::npos);
  EXPECT_NE(error_of(with([](json& j) { j["model"] = 3; })).find("model: expected an object, got 3"),
            std::string::npos);
  EXPECT_NE(error_of(with([](json& j) { j["files"]["rank_00000.safetensors"]["bytes"] = 1.5; }))
                .find("files.rank_00000.safetensors.bytes: expected an integer, got 1.5"),
            std::string::npos);
  EXPECT_NE(error_of(with([](json& j) { j["tensors"]["w"]["pieces"][1]["index"] = 2; }))
                .find("tensors.w.pieces[1].index: 2 is outside [0, 1]"),
            std::string::npos);
  EXPECT_NE(error_of(with([](json& j) { j["tensors"]["w"]["pieces"][0]["dim"] = 2; }))
                .find("tensors.w.pieces[0].dim: 2 is outside [-1, 1]"),
            std::string::npos);
  EXPECT_NE(error_of(with([](json& j) { j["tensors"]["w"]["pieces"][0]["groups"] = 3; }))
                .find("groups: 3 does not divide extent 4 of dim 0 of shape [4,3]"),
            std::string::npos);
  EXPECT_NE(error_of(with([](json& j) { j["tensors"]["w"]["dtype"] = "BF16"; })).find("'BF16' is not supported"),
            std::string::npos);
  EXPECT_NE(error_of(with([](json& j) { j["tensors"]["w"]["pieces"] = json::array(); })).find("pieces: is empty"),
            std::string::npos);
}

TEST(CheckpointIndex, SizesAreBoundedBeforeAnyoneAllocates) {
  // A shape whose element count overflows int64 (fuzz: signed overflow in numel).
  EXPECT_NE(error_of(with([](json& j) { j["tensors"]["w"]["shape"] = {1ll << 40, 1ll << 40}; }))
                .find("shape: [1099511627776,1099511627776] has more than 2^50 elements"),
            std::string::npos);
  EXPECT_NE(error_of(with([](json& j) { j["tensors"]["w"]["shape"] = {4, -3}; })).find("shape[1]: expected an extent"),
            std::string::npos);
  EXPECT_NE(error_of(with([](json& j) { j["tensors"]["w"]["shape"] = json::array({1, 1, 1, 1, 1, 1, 1, 1, 1}); }))
                .find("rank 9 exceeds 8"),
            std::string::npos);
  // A piece claiming more elements than its file has bytes.
  EXPECT_NE(error_of(with([](json& j) { j["tensors"]["w"]["pieces"][0]["end"] = 101; }))
                .find("[0, 101) is 101 f32 elements, but rank_00000.safetensors holds only 400 bytes"),
            std::string::npos);
  EXPECT_NE(error_of(with([](json& j) { j["tensors"]["w"]["pieces"][0]["begin"] = 7; }))
                .find("pieces[0].end: 6 is outside [7, 1125899906842624]"),
            std::string::npos);
}

TEST(CheckpointIndex, ChunkAndHeaderChecksumsAreOptionalAndChecked) {
  // Absent (older checkpoints): none recorded.
  const CheckpointIndex old = parse_checkpoint_index(valid_index().dump(), "ck/index.json");
  EXPECT_EQ(old.tensors.at("w").pieces[0].chunk_bytes, 0);
  EXPECT_FALSE(old.files.at("rank_00000.safetensors").header_checksum.has_value());
  // Present: 6 elements = 24 bytes in chunks of 10 need 3 checksums.
  const auto chunked = [](json& j) {
    j["files"]["rank_00000.safetensors"]["header_checksum"] = "fnv1a64:00000000000000ff";
    j["tensors"]["w"]["pieces"][0]["chunk_bytes"] = 10;
    j["tensors"]["w"]["pieces"][0]["chunks"] = {"0123456789abcdef", "0000000000000001", "fedcba9876543210"};
  };
  const CheckpointIndex index = parse_checkpoint_index(with(chunked).dump(), "ck/index.json");
  EXPECT_EQ(index.files.at("rank_00000.safetensors").header_checksum, 0xffu);
  EXPECT_EQ(index.tensors.at("w").pieces[0].chunks,
            (std::vector<std::uint64_t>{0x0123456789abcdefull, 1, 0xfedcba9876543210ull}));
  EXPECT_NE(error_of(with([&](json& j) { chunked(j); j["tensors"]["w"]["pieces"][0]["chunks"].erase(0); }))
                .find("pieces[0].chunks: holds 2 checksums, but 24 bytes in chunks of 10 need 3"),
            std::string::npos);
  EXPECT_NE(error_of(with([&](json& j) { chunked(j); j["tensors"]["w"]["pieces"][0]["chunks"][1] = "xyz"; }))
                .find("pieces[0].chunks[1]: expected 16 hex digits, got \"xyz\""),
            std::string::npos);
  EXPECT_NE(error_of(with([&](json& j) { chunked(j); j["tensors"]["w"]["pieces"][0]["chunk_bytes"] = 0; }))
                .find("chunk_bytes: 0 is outside [1,"),
            std::string::npos);
  EXPECT_NE(error_of(with([&](json& j) { chunked(j); j["files"]["rank_00000.safetensors"]["header_checksum"] = "12"; }))
                .find("header_checksum: expected fnv1a64:<16 hex digits>, got \"12\""),
            std::string::npos);
}

TEST(CheckpointIndex, NamesFromTheIndexAreQuotedOnOneLine) {
  const std::string m = error_of(with([](json& j) { j["tensors"]["w\nx"] = j["tensors"]["w"]; j["tensors"]["w\nx"]["kind"] = 1; }));
  EXPECT_NE(m.find("tensors.w\\nx.kind: expected a string, got 1"), std::string::npos) << m;
}

TEST(CheckpointIndex, PieceFilesAreListedPlainNames) {
  EXPECT_NE(error_of(with([](json& j) { j["tensors"]["w"]["pieces"][0]["file"] = "other.safetensors"; }))
                .find("tensors.w.pieces[0].file: 'other.safetensors' is not listed under \"files\" (1 files listed)"),
            std::string::npos);
  EXPECT_NE(error_of(with([](json& j) { j["files"]["../../etc/passwd"] = {{"bytes", 1}, {"checksum", "x"}}; }))
                .find("files.../../etc/passwd: '../../etc/passwd' is not a plain file name"),
            std::string::npos);
}

}  // namespace
}  // namespace cleave::checkpoint::checkpoint_index_test

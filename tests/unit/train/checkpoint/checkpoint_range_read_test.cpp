// CheckpointReader::read_shard_range: any element range of any tp shard, read straight from the byte ranges of
// the stored pieces, whatever layout saved them. Asserts:
//  - exactness: for saved layouts (replicated; dim 0 / dim 1 splits with padding and fused groups; each shard
//    cut into two ZeRO-like pieces) and target layouts (other parts, other dim, other groups, sub-ranges), the
//    values equal layers::shard_of of the logical tensor bit for bit, padding 0;
//  - scale: a tp2 shard of a 1.5 MiB tensor saved whole reads about half of it (bytes_read counts every byte
//    taken from disk), a 1/8 range about 1/8; nothing near the whole tensor, no logical tensor built;
//  - checksums: a flipped byte in a chunk the read touches is an Error naming the file, the tensor and the
//    byte range; older checkpoints (no chunk or header checksums) still load, verifying the whole file.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/checkpoint/checksum.hpp"
#include "engine/checkpoint/safetensors.hpp"
#include "engine/core/error.hpp"
#include "engine/train/checkpoint/checkpoint_reader.hpp"
#include "layers/parallel/shard.hpp"

namespace cleave::train::checkpoint_range_read_test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<float> random_values(std::int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) {
    x = dist(gen);
    if (x == 0.0f) x = 0.25f;  // never zero: a missed element cannot read as right
  }
  return v;
}

struct Saved {
  int dim = -1, parts = 1, groups = 1;
};

// A checkpoint directory holding one tensor "w" of `shape`, saved under `saved` (one file per tp shard, each
// shard in two pieces), with chunk checksums of `chunk_bytes` (0: an older checkpoint, without them and without
// header checksums).
class RangeCheckpoint {
 public:
  RangeCheckpoint(const Shape& shape, Saved saved, std::int64_t chunk_bytes, unsigned seed = 7)
      : dir_(fs::temp_directory_path() / fmt::format("cleave_range_{}_{}", ::getpid(), counter_++)),
        logical_(random_values(shape.numel(), seed)) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    json files = json::object();
    json pieces = json::array();
    for (int index = 0; index < saved.parts; ++index) {
      const layers::ShardSpec spec = saved.dim < 0 ? layers::replicated_spec(shape)
                                                   : layers::make_shard_spec(shape, saved.dim, saved.parts, index,
                                                                             saved.groups);
      const std::vector<float> shard = layers::shard_of(logical_, spec);
      const auto numel = static_cast<std::int64_t>(shard.size());
      const std::int64_t cut = numel / 3;
      const std::string file = fmt::format("rank_{:05d}.safetensors", index);
      const auto part = [&](std::int64_t b, std::int64_t e) {
        return std::as_bytes(std::span<const float>(shard.data() + b, static_cast<std::size_t>(e - b)));
      };
      const std::string a = fmt::format("w.{}@0", index), b = fmt::format("w.{}@{}", index, cut);
      const auto written = checkpoint::write_safetensors(
          (dir_ / file).string(), {{a, "F32", {cut}, part(0, cut)}, {b, "F32", {numel - cut}, part(cut, numel)}}, {},
          chunk_bytes);
      files[file] = {{"bytes", written.bytes}, {"checksum", checkpoint::checksum_text(written.checksum)}};
      if (chunk_bytes > 0) files[file]["header_checksum"] = checkpoint::checksum_text(written.header_checksum);
      const std::int64_t ranges[2][2] = {{0, cut}, {cut, numel}};
      for (int k = 0; k < 2; ++k) {
        json p = {{"file", file}, {"name", k == 0 ? a : b}, {"dim", saved.dim}, {"parts", saved.parts},
                  {"index", index}, {"groups", saved.groups}, {"begin", ranges[k][0]}, {"end", ranges[k][1]}};
        if (chunk_bytes > 0) {
          json chunks = json::array();
          for (std::uint64_t h : written.chunk_checksums[static_cast<std::size_t>(k)]) {
            chunks.push_back(fmt::format("{:016x}", h));
          }
          p["chunk_bytes"] = chunk_bytes;
          p["chunks"] = chunks;
        }
        pieces.push_back(p);
      }
    }
    const json index = {{"format", "cleave-checkpoint"}, {"version", 1}, {"step", 1}, {"model", json::object()},
                        {"optimizer", {{"type", "sgd"}, {"steps_done", 1}}}, {"files", files},
                        {"tensors", {{"w", {{"kind", "parameter"}, {"shape", shape.dims()}, {"dtype", "F32"},
                                            {"pieces", pieces}}}}}};
    std::ofstream(dir_ / "index.json") << index.dump(1);
  }
  ~RangeCheckpoint() { fs::remove_all(dir_); }

  const std::vector<float>& logical() const { return logical_; }
  std::string dir() const { return dir_.string(); }
  std::string file(int index) const { return (dir_ / fmt::format("rank_{:05d}.safetensors", index)).string(); }

 private:
  static inline int counter_ = 0;
  fs::path dir_;
  std::vector<float> logical_;
};

std::vector<float> expected_range(const std::vector<float>& logical, const layers::ShardSpec& spec, std::int64_t begin,
                                  std::int64_t count) {
  const std::vector<float> shard = layers::shard_of(logical, spec);
  return {shard.begin() + begin, shard.begin() + begin + count};
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no Error thrown";
  return {};
}

TEST(CheckpointRangeRead, EveryLayoutToEveryLayoutBitExact) {
  // 510 = 3 groups of 170; 170 rows over 4 parts is 43 with padding; 387 columns over 2 is 194 with padding.
  const Shape shape{510, 387};
  const Saved saved_layouts[] = {{-1, 1, 1}, {0, 4, 3}, {1, 2, 1}, {0, 2, 1}};
  struct Target {
    int dim, parts, index, groups;
  };
  const Target targets[] = {{-1, 1, 0, 1}, {0, 2, 1, 1}, {0, 4, 3, 3}, {1, 2, 0, 1}, {1, 3, 2, 1}, {0, 3, 1, 3}};
  for (const Saved& saved : saved_layouts) {
    RangeCheckpoint ck(shape, saved, /*chunk_bytes=*/4096 + 12);  // chunks not aligned to rows or elements
    for (const Target& t : targets) {
      const layers::ShardSpec spec = t.dim < 0 ? layers::replicated_spec(shape)
                                               : layers::make_shard_spec(shape, t.dim, t.parts, t.index, t.groups);
      const std::int64_t numel = layers::shard_shape(spec).numel();
      // The whole shard, and an awkward sub-range (a ZeRO-1 segment) of it.
      const std::pair<std::int64_t, std::int64_t> ranges[] = {{0, numel}, {numel / 5 + 3, numel / 3}};
      for (const auto& [begin, count] : ranges) {
        CheckpointReader reader(ck.dir());
        std::vector<float> out(static_cast<std::size_t>(count), -99.0f);
        reader.read_shard_range("w", spec, begin, out);
        const std::vector<float> want = expected_range(ck.logical(), spec, begin, count);
        ASSERT_EQ(out, want) << "saved dim " << saved.dim << " parts " << saved.parts << " groups " << saved.groups
                             << "; target dim " << t.dim << " parts " << t.parts << " index " << t.index << " groups "
                             << t.groups << " range [" << begin << ", " << begin + count << ")";
        double norm = 0;
        for (float x : out) norm += static_cast<double>(x) * x;
        EXPECT_GT(norm, 0.0);
      }
    }
    CheckpointReader reader(ck.dir());
    EXPECT_EQ(reader.logical("w"), ck.logical());
  }
}

TEST(CheckpointRangeRead, AShardReadsItsShareOfTheBytesNotTheTensor) {
  const Shape shape{512, 768};  // 1.5 MiB of f32, saved whole (tp1) in 64 KiB chunks
  const std::int64_t tensor_bytes = shape.numel() * 4;
  RangeCheckpoint ck(shape, {-1, 1, 1}, 64 << 10);
  {
    const layers::ShardSpec tp2 = layers::make_shard_spec(shape, 0, 2, 1, 1);
    CheckpointReader reader(ck.dir());
    std::vector<float> out(static_cast<std::size_t>(layers::shard_shape(tp2).numel()));
    reader.read_shard_range("w", tp2, 0, out);
    EXPECT_EQ(out, expected_range(ck.logical(), tp2, 0, static_cast<std::int64_t>(out.size())));
    EXPECT_GE(reader.bytes_read(), tensor_bytes / 2);
    EXPECT_LT(reader.bytes_read(), tensor_bytes / 2 + 3 * (64 << 10)) << "a tp2 shard read more than its half";
  }
  {
    // A ZeRO-1 segment (1/8) of the tp2 shard along dim 0.
    const layers::ShardSpec tp2 = layers::make_shard_spec(shape, 0, 2, 0, 1);
    const std::int64_t count = layers::shard_shape(tp2).numel() / 8;
    CheckpointReader reader(ck.dir());
    std::vector<float> out(static_cast<std::size_t>(count));
    reader.read_shard_range("w", tp2, 3 * count, out);
    EXPECT_EQ(out, expected_range(ck.logical(), tp2, 3 * count, count));
    EXPECT_LT(reader.bytes_read(), tensor_bytes / 16 + 3 * (64 << 10));
  }
}

TEST(CheckpointRangeRead, ChunksAreVerifiedAndOlderCheckpointsStillLoad) {
  const Shape shape{256, 256};  // 256 KiB
  RangeCheckpoint ck(shape, {-1, 1, 1}, 16 << 10);
  // Flip one byte near the end of the second piece (rows 192+): a tp2 shard 0 (rows 0-127) never reads it.
  {
    std::fstream f(ck.file(0), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-100, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    f.seekp(-100, std::ios::end);
    f.write(&c, 1);
  }
  const layers::ShardSpec first = layers::make_shard_spec(shape, 0, 2, 0, 1);
  const layers::ShardSpec second = layers::make_shard_spec(shape, 0, 2, 1, 1);
  std::vector<float> out(static_cast<std::size_t>(layers::shard_shape(first).numel()));
  CheckpointReader reader(ck.dir());
  reader.read_shard_range("w", first, 0, out);
  EXPECT_EQ(out, expected_range(ck.logical(), first, 0, static_cast<std::int64_t>(out.size())));
  const std::string m = error_of([&] { reader.read_shard_range("w", second, 0, out); });
  EXPECT_NE(m.find(ck.file(0) + ": bytes ["), std::string::npos) << m;
  EXPECT_NE(m.find("of tensor w.0@21845 (w) fail their checksum"), std::string::npos) << m;

  // An older checkpoint: no chunk or header checksums. Loads, verifying the whole file first.
  RangeCheckpoint old(shape, {0, 2, 1}, 0);
  CheckpointReader old_reader(old.dir());
  old_reader.read_shard_range("w", second, 0, out);
  EXPECT_EQ(out, expected_range(old.logical(), second, 0, static_cast<std::int64_t>(out.size())));
  EXPECT_GE(old_reader.bytes_read(), static_cast<std::int64_t>(fs::file_size(old.file(1))));
  {
    std::fstream f(old.file(0), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-4, std::ios::end);
    f.write("\x7f", 1);
  }
  CheckpointReader damaged(old.dir());
  const std::string m2 = error_of([&] { damaged.read_shard_range("w", first, 0, out); });
  EXPECT_NE(m2.find(old.file(0) + ": checksum fnv1a64:"), std::string::npos) << m2;
  EXPECT_NE(m2.find("does not match"), std::string::npos) << m2;
}

}  // namespace
}  // namespace cleave::train::checkpoint_range_read_test

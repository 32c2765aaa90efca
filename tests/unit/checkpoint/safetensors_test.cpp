// safetensors writer against the strict reader, and the reader against damaged files: a round trip keeps
// names, dtypes, shapes and bytes; a truncated file, a flipped header byte, offsets that leave a gap or
// overlap, and a file whose checksum no longer matches are each refused with a message naming the file
// (and the tensor and numbers where there is one).
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/checkpoint/checksum.hpp"
#include "engine/checkpoint/safetensors.hpp"
#include "engine/core/error.hpp"

namespace cleave::checkpoint::safetensors_test {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("cleave_st_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::vector<char> read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_all(const fs::path& p, const std::vector<char>& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Writes a small file with an f32 [3,5], an i64 [4] and a bf16 [2,3] tensor of random contents.
struct Sample {
  std::vector<float> a;
  std::vector<std::int64_t> b;
  std::vector<std::uint16_t> c;
  WrittenFile written;
};

Sample write_sample(const fs::path& path) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(-2, 2);
  Sample s;
  for (int i = 0; i < 15; ++i) s.a.push_back(u(gen));
  for (int i = 0; i < 4; ++i) s.b.push_back(static_cast<std::int64_t>(gen()) - (1ll << 40));
  for (int i = 0; i < 6; ++i) s.c.push_back(static_cast<std::uint16_t>(gen()));
  s.written = write_safetensors(path.string(),
                                {{"w.a", "F32", {3, 5}, std::as_bytes(std::span(s.a))},
                                 {"b", "I64", {4}, std::as_bytes(std::span(s.b))},
                                 {"c.bf", "BF16", {2, 3}, std::as_bytes(std::span(s.c))}},
                                {{"step", "12"}});
  return s;
}

// Contiguous data ranges with a hand-made header: lets a test write what the writer never would.
void write_raw(const fs::path& p, const std::string& header, std::size_t data_bytes) {
  std::vector<char> out(8 + header.size() + data_bytes, 1);
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  std::memcpy(out.data() + 8, header.data(), header.size());
  write_all(p, out);
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, RoundTripKeepsNamesShapesAndBytes) {
  const fs::path dir = temp_dir("roundtrip");
  const fs::path file = dir / "x.safetensors";
  const Sample s = write_sample(file);
  EXPECT_EQ(s.written.bytes, static_cast<std::int64_t>(fs::file_size(file)));
  EXPECT_EQ(s.written.checksum, file_checksum(file.string()));

  const SafetensorsFile f = read_safetensors(file.string());
  ASSERT_EQ(f.tensors.size(), 3u);
  EXPECT_EQ(f.metadata.at("step"), "12");
  EXPECT_EQ(f.record("w.a").dtype, "F32");
  EXPECT_EQ(f.record("w.a").shape, (std::vector<std::int64_t>{3, 5}));
  EXPECT_EQ(f.record("c.bf").shape, (std::vector<std::int64_t>{2, 3}));
  auto a = f.bytes("w.a");
  ASSERT_EQ(a.size(), 60u);
  EXPECT_EQ(std::memcmp(a.data(), s.a.data(), 60), 0);
  EXPECT_EQ(std::memcmp(f.bytes("b").data(), s.b.data(), 32), 0);
  EXPECT_EQ(std::memcmp(f.bytes("c.bf").data(), s.c.data(), 12), 0);

  // An independent parse: 8-byte little-endian length, JSON header, data right after, offsets packed.
  const auto raw = read_all(file);
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(static_cast<unsigned char>(raw[i])) << (8 * i);
  const auto header = nlohmann::json::parse(raw.begin() + 8, raw.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  EXPECT_EQ(header["w.a"]["data_offsets"], nlohmann::json({0, 60}));
  EXPECT_EQ(header["b"]["data_offsets"], nlohmann::json({60, 92}));
  EXPECT_EQ(header["c.bf"]["data_offsets"], nlohmann::json({92, 104}));
  EXPECT_EQ(raw.size(), 8 + n + 104);
  EXPECT_EQ(std::memcmp(raw.data() + 8 + n, s.a.data(), 60), 0);
  EXPECT_EQ(f.bytes("w.a").size(), 60u);
  EXPECT_NE(error_of([&] { (void)f.bytes("nope"); }).find("tensor nope is missing"), std::string::npos);
}

TEST(Safetensors, WriterRefusesBytesThatDoNotMatchTheShape) {
  const fs::path dir = temp_dir("badwrite");
  std::vector<float> v(5);
  const std::string msg = error_of([&] {
    write_safetensors((dir / "y.safetensors").string(), {{"t", "F32", {2, 3}, std::as_bytes(std::span(v))}});
  });
  EXPECT_NE(msg.find("tensor t has 20 bytes, but shape [2,3] of F32 needs 24"), std::string::npos) << msg;
}

TEST(Safetensors, TruncatedFileIsRefused) {
  const fs::path dir = temp_dir("truncated");
  const fs::path file = dir / "x.safetensors";
  write_sample(file);
  auto raw = read_all(file);
  raw.resize(raw.size() - 3);
  write_all(file, raw);
  const std::string msg = error_of([&] { read_safetensors(file.string()); });
  EXPECT_NE(msg.find(file.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("c.bf"), std::string::npos) << msg;  // the last tensor runs past the data section
  raw.resize(5);
  write_all(file, raw);
  EXPECT_NE(error_of([&] { read_safetensors(file.string()); }).find("shorter than the 8-byte header length"),
            std::string::npos);
}

TEST(Safetensors, FlippedHeaderByteIsRefused) {
  const fs::path dir = temp_dir("flipped");
  const fs::path file = dir / "x.safetensors";
  write_sample(file);
  const auto good = read_all(file);
  // The length field: now longer than the file.
  auto raw = good;
  raw[3] = static_cast<char>(raw[3] ^ 0x40);
  write_all(file, raw);
  std::string msg = error_of([&] { read_safetensors(file.string()); });
  EXPECT_NE(msg.find("header length"), std::string::npos) << msg;
  // A brace of the JSON: no longer parses.
  raw = good;
  raw[8] = static_cast<char>(raw[8] ^ 0x01);
  write_all(file, raw);
  msg = error_of([&] { read_safetensors(file.string()); });
  EXPECT_NE(msg.find("does not parse"), std::string::npos) << msg;
  // A digit of a shape: [3,5] -> [3,7]: the byte length no longer matches the shape.
  raw = good;
  const std::string text(raw.begin(), raw.end());
  const auto at = text.find("[3,5]");
  ASSERT_NE(at, std::string::npos);
  raw[at + 3] = '7';
  write_all(file, raw);
  msg = error_of([&] { read_safetensors(file.string()); });
  EXPECT_NE(msg.find("tensor w.a spans 60 bytes but shape [3,7] of F32 needs 84"), std::string::npos) << msg;
}

TEST(Safetensors, HeaderOnlyReadChecksTheHeaderAndItsChecksum) {
  const fs::path dir = temp_dir("header");
  const fs::path file = dir / "x.safetensors";
  std::vector<float> v(1000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.5f + static_cast<float>(i);
  const auto bytes = std::as_bytes(std::span(v));
  const WrittenFile written = write_safetensors(file.string(), {{"v", "F32", {1000}, bytes}}, {}, 1000);
  // Chunks of 1000 bytes over 4000: four, each the hash of its bytes.
  ASSERT_EQ(written.chunk_checksums.size(), 1u);
  ASSERT_EQ(written.chunk_checksums[0].size(), 4u);
  EXPECT_EQ(written.chunk_checksums[0][2], fnv1a64(bytes.subspan(2000, 1000)));
  EXPECT_EQ(written.checksum, file_checksum(file.string()));  // the whole-file checksum is unchanged by chunking

  const SafetensorsFile head = read_safetensors_header(file.string(), written.header_checksum);
  EXPECT_TRUE(head.data.empty());
  EXPECT_EQ(head.data_offset + 4000, written.bytes);
  EXPECT_EQ(head.record("v").end, 4000);
  const auto raw = read_all(file);
  EXPECT_EQ(written.header_checksum,
            fnv1a64(std::as_bytes(std::span(raw.data(), static_cast<std::size_t>(head.data_offset)))));
  // A flipped header byte: the checksum names the file before the JSON is parsed.
  auto bad = raw;
  bad[20] = static_cast<char>(bad[20] ^ 0x04);
  write_all(file, bad);
  std::string msg = error_of([&] { read_safetensors_header(file.string(), written.header_checksum); });
  EXPECT_NE(msg.find(file.string() + ": checksum fnv1a64:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("-byte header does not match"), std::string::npos) << msg;
  // Truncated data: the header's offsets no longer fit the file's size.
  bad = raw;
  bad.resize(bad.size() - 4);
  write_all(file, bad);
  msg = error_of([&] { read_safetensors_header(file.string()); });
  EXPECT_NE(msg.find("tensor v has data_offsets [0, 4000] outside the 3996-byte data section"), std::string::npos)
      << msg;
}

TEST(Safetensors, OffsetsThatDoNotCoverTheDataAreRefused) {
  const fs::path dir = temp_dir("offsets");
  const fs::path file = dir / "x.safetensors";
  write_raw(file, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})",
            20);
  std::string msg = error_of([&] { read_safetensors(file.string()); });
  EXPECT_NE(msg.find("tensor b starts at byte 12 but the previous data ends at 8 (a gap"), std::string::npos) << msg;
  write_raw(file, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
            12);
  msg = error_of([&] { read_safetensors(file.string()); });
  EXPECT_NE(msg.find("an overlap"), std::string::npos) << msg;
  write_raw(file, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 16);
  msg = error_of([&] { read_safetensors(file.string()); });
  EXPECT_NE(msg.find("the tensors cover 8 bytes but the data section holds 16"), std::string::npos) << msg;
  write_raw(file, R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})", 16);
  msg = error_of([&] { read_safetensors(file.string()); });
  EXPECT_NE(msg.find("dtype 'F64' is not supported"), std::string::npos) << msg;
}

// Found by tests/fuzz/safetensors_fuzz.cpp's contract: header numbers are checked against the bytes before use.
TEST(Safetensors, HeaderNumbersAreCheckedBeforeUse) {
  const auto parse = [](const std::string& header, std::size_t data_bytes) {
    std::vector<std::byte> bytes(8 + header.size() + data_bytes, std::byte{0});
    for (int i = 0; i < 8; ++i) bytes[static_cast<std::size_t>(i)] = static_cast<std::byte>((header.size() >> (8 * i)) & 0xff);
    std::memcpy(bytes.data() + 8, header.data(), header.size());
    return error_of([&] { parse_safetensors(bytes, "x.safetensors"); });
  };
  // numel × 4 overflows int64: refused by size, no signed overflow on the way.
  std::string msg = parse(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", 8);
  EXPECT_NE(msg.find("tensor a has shape [4611686018427387904,4] of F32, more than the 8-byte data section holds"),
            std::string::npos) << msg;
  msg = parse(R"({"a":[1,2]})", 0);
  EXPECT_NE(msg.find("x.safetensors: tensor a: the header entry is array, expected an object"), std::string::npos) << msg;
  msg = parse(R"({"a":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", 8);
  EXPECT_NE(msg.find("tensor a: malformed header entry (type must be string, but is number)"), std::string::npos) << msg;
  msg = parse(R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8);
  EXPECT_NE(msg.find("x.safetensors: tensor a: safetensors dtype 'F64' is not supported"), std::string::npos) << msg;
  // Numbers that are not int64 integers (fuzz: 9.2e20 reached a float-to-int64 cast, undefined behaviour).
  msg = parse(R"({"a":{"dtype":"F32","shape":[9.2e20],"data_offsets":[0,8]}})", 8);
  EXPECT_NE(msg.find("tensor a: malformed header entry (shape holds 9.2e+20, expected integers that fit 64 bits)"),
            std::string::npos) << msg;
  msg = parse(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551615]}})", 8);
  EXPECT_NE(msg.find("data_offsets holds 18446744073709551615"), std::string::npos) << msg;
  msg = parse(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8);
  EXPECT_NE(msg.find("data_offsets has 1 values, expected 2"), std::string::npos) << msg;
  // Tensor names are quoted escaped, so the message stays one line.
  msg = parse(R"({"a\nb":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8);
  EXPECT_NE(msg.find("tensor a\\nb: safetensors dtype 'F64'"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  // A zero extent anywhere makes an empty tensor, however large the other extents.
  const std::string empty = R"({"a":{"dtype":"F32","shape":[4611686018427387904,0],"data_offsets":[0,0]}})";
  std::vector<std::byte> bytes(8 + empty.size());
  bytes[0] = static_cast<std::byte>(empty.size());
  std::memcpy(bytes.data() + 8, empty.data(), empty.size());
  EXPECT_EQ(parse_safetensors(bytes, "x").tensors.at("a").end, 0);
}

TEST(Safetensors, ChecksumChangesWithAnyFlippedDataByte) {
  const fs::path dir = temp_dir("checksum");
  const fs::path file = dir / "x.safetensors";
  const Sample s = write_sample(file);
  auto raw = read_all(file);
  raw[raw.size() - 1] = static_cast<char>(raw[raw.size() - 1] ^ 0x10);  // still parses: only data changed
  write_all(file, raw);
  EXPECT_NO_THROW(read_safetensors(file.string()));
  EXPECT_NE(file_checksum(file.string()), s.written.checksum);
  EXPECT_EQ(checksum_text(0x0123456789abcdefull), "fnv1a64:0123456789abcdef");
  // FNV-1a 64 reference values: "" and "a".
  EXPECT_EQ(fnv1a64({}), 0xcbf29ce484222325ull);
  const char a = 'a';
  EXPECT_EQ(fnv1a64(std::as_bytes(std::span(&a, 1))), 0xaf63dc4c8601ec8cull);
}

}  // namespace
}  // namespace cleave::checkpoint::safetensors_test

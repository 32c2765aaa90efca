// kernels/cuda/flash_ranges.hpp on the CPU: the index ranges the memory-efficient attention kernels loop over,
// checked by brute force against the visibility rule (docs/ops.md "Attention") on every small shape: causal and
// not, sliding windows of 1 key to wider than the sequence, query and key offsets in both orders (ring attention's
// chunk pairs: the diagonal block at a chunk offset, earlier key chunks, a query chunk before its keys), and
// T = 1 and lengths that are not multiples of the blocks. A key a range left out would be a wrong result on the
// GPU with nothing to report it; the kernels take their block bounds from these functions
// (kernels/cuda/flash_attention.cu), so the GPU parity tests only see what these ranges allow.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/flash_ranges.hpp"
#include "kernels/cuda/launch_config.hpp"

namespace cleave::testing::flash_ranges_test {
namespace {

namespace kc = kernels::cuda;

bool visible(const kc::FlashAttentionShape& s, std::int64_t i, std::int64_t j) {
  const std::int64_t pi = s.q_offset + i, pj = s.k_offset + j;
  return (!s.causal || pj <= pi) && (s.window <= 0 || pi - pj < s.window);
}

std::string name(const kc::FlashAttentionShape& s) {
  return "q_len " + std::to_string(s.q_len) + " kv_len " + std::to_string(s.kv_len) + " offsets " +
         std::to_string(s.q_offset) + "/" + std::to_string(s.k_offset) + " window " + std::to_string(s.window) +
         (s.causal ? "" : " non-causal");
}

// Every shape of the grid below (the seam refuses a window without causal attention).
std::vector<kc::FlashAttentionShape> shapes() {
  std::vector<kc::FlashAttentionShape> out;
  for (std::int64_t q_len : {1, 7, 8, 9, 17, 33}) {
    for (std::int64_t kv_len : {1, 5, 16, 17, 40}) {
      for (std::int64_t q_offset : {0, 3, 16, 40}) {
        for (std::int64_t k_offset : {0, 5, 16, 40}) {
          for (std::int64_t window : {0, 1, 3, 16, 50}) {
            for (bool causal : {true, false}) {
              if (!causal && window > 0) continue;
              kc::FlashAttentionShape s;
              s.batch = 1;
              s.q_heads = s.kv_heads = 1;
              s.head_dim = 8;
              s.q_len = q_len;
              s.kv_len = kv_len;
              s.q_offset = q_offset;
              s.k_offset = k_offset;
              s.window = window;
              s.causal = causal;
              out.push_back(s);
            }
          }
        }
      }
    }
  }
  return out;
}

TEST(CudaFlashRanges, EachRowSeesExactlyItsKeys) {
  std::int64_t checked = 0;
  for (const kc::FlashAttentionShape& s : shapes()) {
    for (std::int64_t i = 0; i < s.q_len; ++i) {
      const std::int64_t lo = kc::flash_key_lo(s, s.q_offset + i), hi = kc::flash_key_hi(s, s.q_offset + i);
      for (std::int64_t j = 0; j < s.kv_len; ++j, ++checked) {
        ASSERT_EQ(visible(s, i, j), j >= lo && j < hi) << name(s) << ": row " << i << " key " << j;
      }
    }
  }
  EXPECT_GT(checked, 100000);
}

// The forward's and dQ's tile loop: one key range per block of kFlashRowsPerBlock rows (the last block short).
TEST(CudaFlashRanges, RowBlockTilesHoldEveryVisibleKey) {
  constexpr std::int64_t kRows = kc::launch::kFlashRowsPerBlock;
  for (const kc::FlashAttentionShape& s : shapes()) {
    for (std::int64_t first = 0; first < s.q_len; first += kRows) {
      const std::int64_t last = (first + kRows < s.q_len ? first + kRows : s.q_len) - 1;
      const kc::FlashIndexRange tiles = kc::flash_key_tiles(s, first, last);
      for (std::int64_t i = first; i <= last; ++i) {
        for (std::int64_t j = 0; j < s.kv_len; ++j) {
          if (visible(s, i, j)) {
            ASSERT_TRUE(j >= tiles.begin && j < tiles.end)
                << name(s) << ": rows " << first << ".." << last << " tiles [" << tiles.begin << ", " << tiles.end
                << ") miss key " << j << " of row " << i;
          }
        }
      }
    }
  }
}

// The dK/dV kernel's row loop: one query range per block of kFlashKeysPerBlock keys (the last block short); it
// holds every row that sees one of the block's keys, and its ends are rows that see one (no whole empty sweep).
TEST(CudaFlashRanges, KeyBlockRowsHoldEveryRowThatSeesAKey) {
  constexpr std::int64_t kKeys = kc::launch::kFlashKeysPerBlock;
  for (const kc::FlashAttentionShape& s : shapes()) {
    for (std::int64_t kb = 0; kb < s.kv_len; kb += kKeys) {
      const std::int64_t ke = kb + kKeys < s.kv_len ? kb + kKeys : s.kv_len;
      const kc::FlashIndexRange rows = kc::flash_query_rows_of_keys(s, kb, ke);
      std::int64_t first_seen = -1, last_seen = -1;
      for (std::int64_t i = 0; i < s.q_len; ++i) {
        bool sees = false;
        for (std::int64_t j = kb; j < ke; ++j) sees = sees || visible(s, i, j);
        if (!sees) continue;
        if (first_seen < 0) first_seen = i;
        last_seen = i;
        ASSERT_TRUE(i >= rows.begin && i < rows.end)
            << name(s) << ": keys " << kb << ".." << ke - 1 << " rows [" << rows.begin << ", " << rows.end
            << ") miss row " << i;
      }
      if (first_seen >= 0) {
        EXPECT_EQ(rows.begin, first_seen) << name(s) << ": keys " << kb << ".." << ke - 1;
        EXPECT_EQ(rows.end, last_seen + 1) << name(s) << ": keys " << kb << ".." << ke - 1;
      }
    }
  }
}

// Long context: positions far past 2^31 (a 2^20-token sequence of 2^12-column rows, offsets near 2^40) keep their
// ranges; int32 arithmetic would wrap.
TEST(CudaFlashRanges, LongContextPositionsDoNotWrap) {
  kc::FlashAttentionShape s;
  s.batch = 2;
  s.q_heads = s.kv_heads = 32;
  s.head_dim = 128;
  s.q_len = s.kv_len = std::int64_t{1} << 20;
  s.q_offset = s.k_offset = (std::int64_t{1} << 40) - s.q_len;
  s.window = std::int64_t{3} << 30;
  EXPECT_EQ(kc::flash_key_hi(s, s.q_offset + s.q_len - 1), s.kv_len);
  EXPECT_EQ(kc::flash_key_lo(s, s.q_offset + s.q_len - 1), 0);
  const kc::FlashIndexRange rows = kc::flash_query_rows_of_keys(s, s.kv_len - 16, s.kv_len);
  EXPECT_EQ(rows.begin, s.q_len - 16);
  EXPECT_EQ(rows.end, s.q_len);
  s.window = 1000;  // each row sees its last 1,000 keys
  const kc::FlashIndexRange tiles = kc::flash_key_tiles(s, s.q_len - 8, s.q_len - 1);
  EXPECT_EQ(tiles.begin, s.q_len - 8 - 999);
  EXPECT_EQ(tiles.end, s.q_len);
  EXPECT_EQ(kc::flash_query_rows_of_keys(s, 0, 16).end, 15 + 1000);
}

}  // namespace
}  // namespace cleave::testing::flash_ranges_test

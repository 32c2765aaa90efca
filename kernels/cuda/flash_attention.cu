// Memory-efficient attention kernels (flash_attention.hpp; math in docs/ops.md "Attention").
//
// Shared pieces: lane d of a warp owns head dims d, d + 32, d + 64, d + 96 (kDimsPerLane slots, head_dim <= 128);
// K/V tiles are staged as f32 with a padded row (kTileStride) so lane j reading row j hits distinct banks. Every
// loop that reaches __syncthreads or a shuffle has a bound that is uniform over the block (tile ranges come from
// the block's first and last rows) or over the warp. Masked scores are skipped explicitly (p = 0 exactly).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/float_io.cuh"
#include "kernels/cuda/flash_attention.hpp"
#include "kernels/cuda/flash_ranges.hpp"

namespace cleave::kernels::cuda::detail {
namespace {

constexpr int kWarps = kThreads / kWarp;                         // 8
constexpr int kKeyTile = kWarp;                                  // keys per shared tile: one per lane
constexpr int kDimsPerLane = static_cast<int>(kFlashMaxHeadDim) / kWarp;  // 4
constexpr int kTileStride = static_cast<int>(kFlashMaxHeadDim) + 1;
constexpr int kKeysPerWarp = static_cast<int>(launch::kFlashKeysPerBlock) / kWarps;  // 2 (dk/dv kernel)
static_assert(launch::kFlashRowsPerBlock == kWarps, "one query row per warp");

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void put(float* p, float v) { *p = v; }
__device__ __forceinline__ void put(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// Stages keys [k0, k0 + 32) of a [kv_len, ld] head into a [32][kTileStride] f32 tile (rows past kv_len: zeros).
template <typename T>
__device__ void load_tile(float* tile, const T* base, int64_t ld, int64_t k0, int64_t kv_len, int64_t hd) {
  for (int64_t e = threadIdx.x; e < kKeyTile * hd; e += kThreads) {
    const int64_t j = e / hd, d = e % hd;
    tile[j * kTileStride + d] = k0 + j < kv_len ? to_f32(base[(k0 + j) * ld + d]) : 0.0f;
  }
}

// One warp per query row. dq_mode false: the forward (out, lse). dq_mode true: dq from the saved lse and D.
template <typename T, bool kDq>
__device__ void query_rows(const T* q, const T* k, const T* v, const T* dout, const float* lse_in, const float* d_rows,
                           T* out_or_dq, float* lse_out, FlashAttentionShape s, bool accumulate) {
  __shared__ float k_tile[kKeyTile * kTileStride];
  __shared__ float v_tile[kKeyTile * kTileStride];
  __shared__ float q_row[kWarps][kFlashMaxHeadDim];
  __shared__ float do_row[kWarps][kFlashMaxHeadDim];
  const int lane = static_cast<int>(threadIdx.x) % kWarp, warp = static_cast<int>(threadIdx.x) / kWarp;
  const int64_t h = blockIdx.y, b = blockIdx.z, g = h / (s.q_heads / s.kv_heads), hd = s.head_dim;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kWarps;
  const int64_t i = first + warp;
  const bool row_ok = i < s.q_len;
  const int64_t last = (first + kWarps < s.q_len ? first + kWarps : s.q_len) - 1;
  const T* kg = k + b * s.kv_len * s.ld_k + g * hd;
  const T* vg = v + b * s.kv_len * s.ld_v + g * hd;
  const int64_t lse_at = (b * s.q_heads + h) * s.q_len + i;
  if (row_ok) {
    for (int64_t d = lane; d < hd; d += kWarp) {
      q_row[warp][d] = to_f32(q[(b * s.q_len + i) * s.ld_q + h * hd + d]);
      if (kDq) do_row[warp][d] = to_f32(dout[(b * s.q_len + i) * s.ld_o + h * hd + d]);
    }
  }
  const int64_t pi = s.q_offset + i;
  const int64_t lo = row_ok ? flash_key_lo(s, pi) : 0, hi = row_ok ? flash_key_hi(s, pi) : 0;
  const FlashIndexRange tiles = flash_key_tiles(s, first, last);  // block-uniform (flash_ranges.hpp)
  const int64_t tiles_lo = tiles.begin, tiles_hi = tiles.end;
  const float row_lse = kDq && row_ok ? lse_in[lse_at] : 0.0f;
  const float row_d = kDq && row_ok ? d_rows[lse_at] : 0.0f;
  float acc[kDimsPerLane] = {0.0f, 0.0f, 0.0f, 0.0f};
  float m = -INFINITY, l = 0.0f;
  for (int64_t k0 = tiles_lo; k0 < tiles_hi; k0 += kKeyTile) {
    __syncthreads();  // the previous tile (and, the first time, q_row) is complete / no longer read
    load_tile(k_tile, kg, s.ld_k, k0, s.kv_len, hd);
    load_tile(v_tile, vg, s.ld_v, k0, s.kv_len, hd);
    __syncthreads();
    const int64_t j = k0 + lane;
    const bool vis = row_ok && j >= lo && j < hi;
    float score = 0.0f;
    for (int64_t d = 0; d < hd; ++d) score += q_row[warp][d] * k_tile[lane * kTileStride + d];
    score *= s.scale;
    float p = 0.0f;
    if (kDq) {
      if (vis && row_lse != -INFINITY) {
        p = expf(score - row_lse);
        float dp = 0.0f;
        for (int64_t d = 0; d < hd; ++d) dp += do_row[warp][d] * v_tile[lane * kTileStride + d];
        p = p * (dp - row_d) * s.scale;  // ds
      }
    } else {
      const float tile_max = warp_max(vis ? score : -INFINITY);
      const float m_new = fmaxf(m, tile_max);
      if (m_new != -INFINITY) {  // warp-uniform
        const float alpha = m == -INFINITY ? 0.0f : expf(m - m_new);
        p = vis ? expf(score - m_new) : 0.0f;
        l = l * alpha + warp_sum(p);
        for (int u = 0; u < kDimsPerLane; ++u) acc[u] *= alpha;
        m = m_new;
      }
    }
    // acc[d] += sum_j w_j * X[j][d] (forward: p and V; dq: ds and K), w_j broadcast from lane j.
    const float* x_tile = kDq ? k_tile : v_tile;
    for (int jj = 0; jj < kKeyTile; ++jj) {
      const float w = __shfl_sync(0xffffffffu, p, jj);
      if (w == 0.0f) continue;  // warp-uniform: every lane got the same w
      for (int u = 0; u < kDimsPerLane; ++u) {
        const int64_t d = lane + u * kWarp;
        if (d < hd) acc[u] += w * x_tile[jj * kTileStride + d];
      }
    }
  }
  if (!row_ok) return;
  T* dst = out_or_dq + (b * s.q_len + i) * (kDq ? s.ld_q : s.ld_o) + h * hd;
  if (kDq) {
    for (int u = 0; u < kDimsPerLane; ++u) {
      const int64_t d = lane + u * kWarp;
      if (d < hd) put(dst + d, acc[u] + (accumulate ? to_f32(dst[d]) : 0.0f));
    }
  } else {
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int u = 0; u < kDimsPerLane; ++u) {
      const int64_t d = lane + u * kWarp;
      if (d < hd) put(dst + d, acc[u] * inv);
    }
    if (lane == 0) lse_out[lse_at] = l > 0.0f ? m + logf(l) : -INFINITY;
  }
}

template <typename T>
__global__ void flash_forward_kernel(const T* q, const T* k, const T* v, T* out, float* lse, FlashAttentionShape s) {
  query_rows<T, false>(q, k, v, nullptr, nullptr, nullptr, out, lse, s, false);
}

template <typename T>
__global__ void flash_backward_dq_kernel(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                                         const float* d_rows, T* dq, FlashAttentionShape s, bool accumulate) {
  query_rows<T, true>(q, k, v, dout, lse, d_rows, dq, nullptr, s, accumulate);
}

// D[row] = sum_d dout * out over rows = batch x q_heads x q_len (row order b, h, i), one warp per row.
template <typename T>
__global__ void flash_backward_dot_kernel(const T* out, const T* dout, float* d_rows, FlashAttentionShape s) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t rows = s.batch * s.q_heads * s.q_len, hd = s.head_dim;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / kWarp; r < rows;
       r += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int64_t i = r % s.q_len, h = (r / s.q_len) % s.q_heads, b = r / (s.q_len * s.q_heads);
    const int64_t at = (b * s.q_len + i) * s.ld_o + h * hd;
    float dot = 0.0f;
    for (int64_t d = lane; d < hd; d += kWarp) dot += to_f32(out[at + d]) * to_f32(dout[at + d]);
    dot = warp_sum(dot);
    if (lane == 0) d_rows[r] = dot;
  }
}

// 16 keys of kv head blockIdx.y per block, two per warp in registers; query rows of the group's heads streamed
// through shared memory 8 at a time. dk_j = sum_i ds_ij q_i, dv_j = sum_i p_ij dout_i.
template <typename T>
__global__ void flash_backward_dkdv_kernel(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                                           const float* d_rows, T* dk, T* dv, FlashAttentionShape s, bool accumulate) {
  __shared__ float q_tile[kWarps][kFlashMaxHeadDim];
  __shared__ float do_tile[kWarps][kFlashMaxHeadDim];
  __shared__ float lse_tile[kWarps];
  __shared__ float d_tile[kWarps];
  const int lane = static_cast<int>(threadIdx.x) % kWarp, warp = static_cast<int>(threadIdx.x) / kWarp;
  const int64_t g = blockIdx.y, b = blockIdx.z, hd = s.head_dim, group = s.q_heads / s.kv_heads;
  const int64_t kb = static_cast<int64_t>(blockIdx.x) * launch::kFlashKeysPerBlock;
  const int64_t ke = kb + launch::kFlashKeysPerBlock < s.kv_len ? kb + launch::kFlashKeysPerBlock : s.kv_len;
  float kr[kKeysPerWarp][kDimsPerLane], vr[kKeysPerWarp][kDimsPerLane];
  float dkr[kKeysPerWarp][kDimsPerLane], dvr[kKeysPerWarp][kDimsPerLane];
  int64_t key[kKeysPerWarp];
  for (int c = 0; c < kKeysPerWarp; ++c) {
    key[c] = kb + warp * kKeysPerWarp + c;
    for (int u = 0; u < kDimsPerLane; ++u) {
      const int64_t d = lane + u * kWarp;
      const bool ok = key[c] < s.kv_len && d < hd;
      kr[c][u] = ok ? to_f32(k[(b * s.kv_len + key[c]) * s.ld_k + g * hd + d]) : 0.0f;
      vr[c][u] = ok ? to_f32(v[(b * s.kv_len + key[c]) * s.ld_v + g * hd + d]) : 0.0f;
      dkr[c][u] = 0.0f;
      dvr[c][u] = 0.0f;
    }
  }
  // Queries that see any key of [kb, ke): block-uniform (flash_ranges.hpp).
  const FlashIndexRange rows = flash_query_rows_of_keys(s, kb, ke);
  const int64_t i_begin = rows.begin, i_end = rows.end;
  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    for (int64_t i0 = i_begin; i0 < i_end; i0 += kWarps) {
      __syncthreads();  // the previous rows are no longer read
      for (int64_t e = threadIdx.x; e < kWarps * hd; e += kThreads) {
        const int64_t r = e / hd, d = e % hd, i = i0 + r;
        const bool ok = i < i_end;
        q_tile[r][d] = ok ? to_f32(q[(b * s.q_len + i) * s.ld_q + h * hd + d]) : 0.0f;
        do_tile[r][d] = ok ? to_f32(dout[(b * s.q_len + i) * s.ld_o + h * hd + d]) : 0.0f;
      }
      if (threadIdx.x < kWarps) {
        const int64_t i = i0 + threadIdx.x;
        const int64_t at = (b * s.q_heads + h) * s.q_len + i;
        lse_tile[threadIdx.x] = i < i_end ? lse[at] : -INFINITY;
        d_tile[threadIdx.x] = i < i_end ? d_rows[at] : 0.0f;
      }
      __syncthreads();
      for (int r = 0; r < kWarps && i0 + r < i_end; ++r) {
        const int64_t pi = s.q_offset + i0 + r;
        const int64_t lo = flash_key_lo(s, pi), hi = flash_key_hi(s, pi);
        for (int c = 0; c < kKeysPerWarp; ++c) {
          float qk = 0.0f, dov = 0.0f;
          for (int u = 0; u < kDimsPerLane; ++u) {
            const int64_t d = lane + u * kWarp;
            if (d < hd) {
              qk += q_tile[r][d] * kr[c][u];
              dov += do_tile[r][d] * vr[c][u];
            }
          }
          qk = warp_sum(qk);
          dov = warp_sum(dov);
          const bool vis = key[c] >= lo && key[c] < hi && lse_tile[r] != -INFINITY;  // warp-uniform
          if (!vis) continue;
          const float p = expf(qk * s.scale - lse_tile[r]);
          const float ds = p * (dov - d_tile[r]) * s.scale;
          for (int u = 0; u < kDimsPerLane; ++u) {
            const int64_t d = lane + u * kWarp;
            if (d < hd) {
              dvr[c][u] += p * do_tile[r][d];
              dkr[c][u] += ds * q_tile[r][d];
            }
          }
        }
      }
    }
  }
  for (int c = 0; c < kKeysPerWarp; ++c) {
    if (key[c] >= s.kv_len) continue;
    T* dkrow = dk + (b * s.kv_len + key[c]) * s.ld_k + g * hd;
    T* dvrow = dv + (b * s.kv_len + key[c]) * s.ld_v + g * hd;
    for (int u = 0; u < kDimsPerLane; ++u) {
      const int64_t d = lane + u * kWarp;
      if (d >= hd) continue;
      put(dkrow + d, dkr[c][u] + (accumulate ? to_f32(dkrow[d]) : 0.0f));
      put(dvrow + d, dvr[c][u] + (accumulate ? to_f32(dvrow[d]) : 0.0f));
    }
  }
}

// One warp per (b, h, t) row: lse = log(e^la + e^lb), out = e^(la - lse) out_a + e^(lb - lse) out_b.
template <typename T>
__global__ void attention_merge_kernel(const T* out_a, const float* lse_a, const T* out_b, const float* lse_b, T* out,
                                       float* lse, int64_t batch, int64_t len, int64_t heads, int64_t head_dim) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t rows = batch * heads * len;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / kWarp; r < rows;
       r += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int64_t t = r % len, h = (r / len) % heads, b = r / (len * heads);
    const int64_t at = (b * len + t) * heads * head_dim + h * head_dim;
    const float la = lse_a[r], lb = lse_b[r];
    const float mx = fmaxf(la, lb);
    float wa = 0.0f, wb = 0.0f, l = -INFINITY;
    if (mx != -INFINITY) {
      l = mx + logf(expf(la - mx) + expf(lb - mx));
      wa = expf(la - l);
      wb = expf(lb - l);
    }
    for (int64_t d = lane; d < head_dim; d += kWarp) {
      put(out + at + d, mx == -INFINITY ? 0.0f : wa * to_f32(out_a[at + d]) + wb * to_f32(out_b[at + d]));
    }
    __syncwarp();  // every lane has read lse_a / lse_b before lane 0 overwrites lse (it may alias lse_a)
    if (lane == 0) lse[r] = l;
  }
}

template <typename T>
const T* typed(const void* p, int64_t col) {
  return static_cast<const T*>(p) + col;
}

}  // namespace

cudaError_t launch_flash_forward(FloatType type, const void* q, const void* k, const void* v, void* out, float* lse,
                                 const FlashAttentionShape& s, cudaStream_t stream) {
  return with_float_type(type, [&](auto tag) {
    using T = decltype(tag);
    const LaunchConfig c = launch::flash_query_rows(s.q_len, s.q_heads, s.batch);
    flash_forward_kernel<T><<<to_grid(c), to_block(c), 0, stream>>>(
        static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), static_cast<T*>(out), lse, s);
    return cudaGetLastError();
  });
}

cudaError_t launch_flash_backward(FloatType type, const void* q, const void* k, const void* v, const void* out,
                                  const float* lse, const void* dout, void* dq, void* dk, void* dv,
                                  const FlashAttentionShape& s, bool accumulate, float* d_rows, cudaStream_t stream) {
  return with_float_type(type, [&](auto tag) {
    using T = decltype(tag);
    const T* tq = static_cast<const T*>(q);
    const T* tk = static_cast<const T*>(k);
    const T* tv = static_cast<const T*>(v);
    const T* tdo = static_cast<const T*>(dout);
    if (s.q_len > 0) {
      const LaunchConfig dot = launch::warp_per_row(s.batch * s.q_heads * s.q_len);
      flash_backward_dot_kernel<T><<<to_grid(dot), to_block(dot), 0, stream>>>(static_cast<const T*>(out), tdo,
                                                                                d_rows, s);
      const LaunchConfig c = launch::flash_query_rows(s.q_len, s.q_heads, s.batch);
      flash_backward_dq_kernel<T><<<to_grid(c), to_block(c), 0, stream>>>(tq, tk, tv, tdo, lse, d_rows,
                                                                          static_cast<T*>(dq), s, accumulate);
    }
    if (s.kv_len > 0) {
      const LaunchConfig c = launch::flash_key_rows(s.kv_len, s.kv_heads, s.batch);
      flash_backward_dkdv_kernel<T><<<to_grid(c), to_block(c), 0, stream>>>(
          tq, tk, tv, tdo, lse, d_rows, static_cast<T*>(dk), static_cast<T*>(dv), s, accumulate);
    }
    return cudaGetLastError();
  });
}

cudaError_t launch_attention_merge(FloatType type, const void* out_a, const float* lse_a, const void* out_b,
                                   const float* lse_b, void* out, float* lse, int64_t batch, int64_t len,
                                   int64_t heads, int64_t head_dim, cudaStream_t stream) {
  return with_float_type(type, [&](auto tag) {
    using T = decltype(tag);
    const LaunchConfig c = launch::warp_per_row(batch * heads * len);
    attention_merge_kernel<T><<<to_grid(c), to_block(c), 0, stream>>>(typed<T>(out_a, 0), lse_a, typed<T>(out_b, 0),
                                                                      lse_b, static_cast<T*>(out), lse, batch, len, heads,
                                                                      head_dim);
    return cudaGetLastError();
  });
}

}  // namespace cleave::kernels::cuda::detail

// attn_long: decode attention for long contexts (split-KV flash decoding), a whole-block phase
// after llama_qkv_rope.
//
//   o[b, h, :] = softmax_j(q[b, h] . K[b, h / 4, j] / 8) V[b, h / 4, j],  j = 0 .. L
//
// Work items are (sequence, KV head, split): S splits of the context's 64-key tiles, S chosen so
// that the items fill the grid (at most kMaxSplits). A block walks its items' tiles in order; the
// K and V tiles (8 KB each, contiguous in the cache) stream through a ring of `kv_stages` stages by
// cp.async.bulk, issued by thread 0 ahead of the consumers and completed on the `full` mbarriers;
// the eight warps release a stage on `empty`. Per tile, warp w scores keys 8w..8w+7 for the group's
// four query heads (lane l: dims 2l, 2l + 1), then every warp updates the running max and sum and
// its partial output over its keys (online softmax). At the end of a split the warps' partials are
// summed and written to the `splits` workspace with the split's max and sum; after a grid barrier,
// each output element combines its splits: sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s.

#include <cuda_bf16.h>

namespace {
constexpr int kGroup = 4;       // query heads per KV head
constexpr int kTile = 64;       // keys per tile
constexpr int kWarps = 8;       // warps that consume (the `empty` arrivals)
constexpr int kMaxSplits = 17;  // the `splits` workspace's room per (sequence, KV head)
constexpr int kSplitFloats = kGroup * 66;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// The block's walk over its items' tiles, in order: items blockIdx.x, + gridDim.x, ...; split s
// of an item covers tiles [s * per, min((s + 1) * per, tiles)), possibly none.
struct Walk {
  int item, tile, end, items, splits, per, tiles;
  __device__ void start(int first) {
    item = first - static_cast<int>(gridDim.x);
    tile = end = 0;
    next_item();
  }
  __device__ void bounds() {
    const int s = item % splits;
    tile = s * per;
    end = min(tile + per, tiles);
  }
  __device__ void next_item() {  // the next item of this block that has a tile (item >= items: done)
    for (item += gridDim.x; item < items; item += gridDim.x) {
      bounds();
      if (tile < end) return;
    }
  }
  __device__ bool done() const { return item >= items; }
  __device__ void advance() {
    if (++tile >= end) next_item();
  }
};
}  // namespace

extern "C" __device__ void llama_attn_long(pl_ctx ctx, pl_bind_attn_long b) {
  __syncthreads();
  if (ctx.thread == 0) pl_grid_sync(b.arrived, 1);  // q and the appended K/V rows are stored
  __syncthreads();
  const int warp = ctx.thread / 32, lane = ctx.thread % 32;
  const int n_keys = b.L + 1, tiles = (n_keys + kTile - 1) / kTile;
  const int pairs = b.B * 8;
  const int splits = max(1, min(min((static_cast<int>(gridDim.x) + pairs - 1) / pairs, kMaxSplits), tiles));
  const int per = (tiles + splits - 1) / splits;
  const __nv_bfloat16* q_all = reinterpret_cast<const __nv_bfloat16*>(b.q);
  const __nv_bfloat16* k_all = reinterpret_cast<const __nv_bfloat16*>(b.k_cache);
  const __nv_bfloat16* v_all = reinterpret_cast<const __nv_bfloat16*>(b.v_cache);
  float* split_out = reinterpret_cast<float*>(b.splits);  // [pairs * kMaxSplits][4][66]
  float* scores = reinterpret_cast<float*>(ctx.smem + b.scores);    // [4][64]
  float* partial = reinterpret_cast<float*>(ctx.smem + b.partial);  // [8][4][64]
  const __nv_bfloat16* ring = reinterpret_cast<const __nv_bfloat16*>(ctx.smem + b.ring);

  Walk producer{0, 0, 0, pairs * splits, splits, per, tiles}, consumer = producer;
  producer.start(blockIdx.x);
  consumer.start(blockIdx.x);
  int issued = 0, used = 0;  // ring positions: tiles issued by thread 0, tiles consumed by the block

  // Thread 0 keeps up to kv_stages tiles in flight ahead of the consumers.
  auto issue = [&]() {
    while (!producer.done() && issued < used + b.kv_stages) {
      const int stage = issued % b.kv_stages;
      const uint32_t full = pl_mbar(ctx, b.full, stage);
      pl_mbar_wait(pl_mbar(ctx, b.empty, stage), ((issued / b.kv_stages) & 1) ^ 1);
      pl_mbar_arrive_expect_tx(full, 16384);
      const int pair = producer.item / splits;
      const size_t row = (static_cast<size_t>(pair) * b.Lmax + static_cast<size_t>(producer.tile) * kTile) * 64;
      const uint32_t dst = pl_smem_addr(ctx.smem + b.ring + stage * 16384);
      pl_bulk_g2s(dst, k_all + row, 8192, full);
      pl_bulk_g2s(dst + 8192, v_all + row, 8192, full);
      producer.advance();
      ++issued;
    }
  };

  while (!consumer.done()) {
    const int item = consumer.item, pair = item / splits, seq = pair / 8, kv = pair % 8;
    float2 qv[kGroup];
#pragma unroll
    for (int h = 0; h < kGroup; ++h)
      qv[h] = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(
          q_all + (static_cast<size_t>(seq) * 32 + kv * kGroup + h) * 64 + 2 * lane));
    float m[kGroup], l[kGroup];
    float2 acc[kGroup];
#pragma unroll
    for (int h = 0; h < kGroup; ++h) {
      m[h] = -INFINITY;
      l[h] = 0.f;
      acc[h] = make_float2(0.f, 0.f);
    }
    while (!consumer.done() && consumer.item == item) {  // this split's tiles
      if (ctx.thread == 0) issue();
      const int stage = used % b.kv_stages, tile = consumer.tile;
      pl_mbar_wait(pl_mbar(ctx, b.full, stage), (used / b.kv_stages) & 1);
      const __nv_bfloat16* k_s = ring + stage * 8192;  // [64 keys][64 dims]
      const __nv_bfloat16* v_s = k_s + 4096;
      __syncthreads();  // the previous tile's scores are read
      if (warp < kWarps) {
        for (int kk = warp * 8; kk < warp * 8 + 8; ++kk) {
          const bool valid = tile * kTile + kk < n_keys;
          const float2 k = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(k_s + kk * 64 + 2 * lane));
#pragma unroll
          for (int h = 0; h < kGroup; ++h) {
            const float s = warp_sum(qv[h].x * k.x + qv[h].y * k.y);
            if (lane == 0) scores[h * kTile + kk] = valid ? s * 0.125f : -INFINITY;  // 1 / sqrt(64)
          }
        }
      }
      __syncthreads();  // the tile's scores are complete
      if (warp < kWarps) {
#pragma unroll
        for (int h = 0; h < kGroup; ++h) {
          const float s0 = scores[h * kTile + lane], s1 = scores[h * kTile + 32 + lane];
          const float m_new = fmaxf(m[h], warp_max(fmaxf(s0, s1)));  // finite: every tile has a valid key
          const float scale = __expf(m[h] - m_new);                    // 0 on the first tile (m = -inf)
          l[h] = l[h] * scale + warp_sum(__expf(s0 - m_new) + __expf(s1 - m_new));
          acc[h].x *= scale;
          acc[h].y *= scale;
          m[h] = m_new;
        }
        for (int kk = warp * 8; kk < warp * 8 + 8 && tile * kTile + kk < n_keys; ++kk) {  // rows past L: never read
          const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(v_s + kk * 64 + 2 * lane));
#pragma unroll
          for (int h = 0; h < kGroup; ++h) {
            const float p = __expf(scores[h * kTile + kk] - m[h]);
            acc[h].x = fmaf(p, v.x, acc[h].x);
            acc[h].y = fmaf(p, v.y, acc[h].y);
          }
        }
        __syncwarp();
        if (lane == 0) pl_mbar_arrive(pl_mbar(ctx, b.empty, stage));  // this warp is done with the stage
      }
      consumer.advance();
      ++used;
    }
    // The split's output: the warps' partials summed, with its max and sum (the same in every warp).
    if (warp < kWarps) {
#pragma unroll
      for (int h = 0; h < kGroup; ++h)
        *reinterpret_cast<float2*>(partial + (warp * kGroup + h) * 64 + 2 * lane) = acc[h];
    }
    __syncthreads();
    float* out = split_out + static_cast<size_t>(item) * kSplitFloats;
    for (int i = ctx.thread; i < kGroup * 64; i += blockDim.x) {
      const int h = i / 64, d = i % 64;
      float sum = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) sum += partial[(w * kGroup + h) * 64 + d];
      out[h * 66 + d] = sum;
    }
    if (warp == 0 && lane < kGroup) {  // lane h writes head h's max and sum (the same in every lane)
      float mh = 0.f, lh = 0.f;
#pragma unroll
      for (int h = 0; h < kGroup; ++h)
        if (lane == h) mh = m[h], lh = l[h];  // unrolled: a runtime index would put m and l in local memory
      out[lane * 66 + 64] = mh;
      out[lane * 66 + 65] = lh;
    }
    __syncthreads();  // the partials are read before the next split writes them
  }
  __syncthreads();
  if (ctx.thread == 0) pl_grid_sync(b.arrived, 2);  // every split is written
  __syncthreads();
  __nv_bfloat16* o_all = reinterpret_cast<__nv_bfloat16*>(b.o);
  for (int i = blockIdx.x * blockDim.x + ctx.thread; i < b.B * 32 * 64; i += gridDim.x * blockDim.x) {
    const int d = i % 64, head = (i / 64) % 32, seq = i / (32 * 64);
    const int pair = seq * 8 + head / kGroup, h = head % kGroup;
    float big = -INFINITY;
    for (int s = 0; s < splits; ++s)
      if (s * per < tiles) big = fmaxf(big, split_out[(static_cast<size_t>(pair) * splits + s) * kSplitFloats + h * 66 + 64]);
    float num = 0.f, den = 0.f;
    for (int s = 0; s < splits; ++s) {
      if (s * per >= tiles) continue;  // a split past the last tile (per rounds up) has no record
      const float* rec = split_out + (static_cast<size_t>(pair) * splits + s) * kSplitFloats + h * 66;
      const float w = __expf(rec[64] - big);
      num = fmaf(w, rec[d], num);
      den = fmaf(w, rec[65], den);
    }
    o_all[i] = __float2bfloat16(__fdividef(num, den));
  }
}

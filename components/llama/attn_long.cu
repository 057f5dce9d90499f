// attn_long: decode attention for long contexts (split-KV flash decoding), a whole-block phase
// after llama_qkv_rope.
//
//   o[b, h, :] = softmax_j(q[b, h] . K[b, h / 4, j] / 8) V[b, h / 4, j],  j = 0 .. L
//
// Work items are (sequence, KV head, split): S splits of the context's 64-key tiles, S the most
// that keeps items <= blocks (at most kMaxSplits), so no block takes a second item when one would
// do. A block walks its items' tiles in order; the K and V tiles (8 KB each, contiguous in the
// cache) stream through a ring of `kv_stages` stages by cp.async.bulk, issued by thread 0 ahead of
// the consumers and completed on the `full` mbarriers; each of the eight warps releases a stage on
// `empty` as soon as it has its share of the tile in registers. Thread 0 waits for a stage to be
// freed only when the tile its own warp needs next is not issued yet, so a slower warp holds back
// the copies, never warp 0's work. Tiles that do not hold the new row L are already copied while
// the block waits at the first grid barrier.
//
// The ring must drain at the read bandwidth (a 16 KB tile per ~850 cycles per SM), so a tile costs
// each warp ~200 instructions and no block-wide barrier: warp w owns keys 8w..8w+7 of every
// tile and keeps its own online softmax over them (max m, sum l, output acc per head), on the
// tensor cores (mma.sync, bf16 in, fp32 sums). The group's 4 query heads are rows 0..3 of the A
// operand (rows 4..15 zero), held in registers for the whole item:
//   scores  S[16 x 8 keys] = Q K_w^T: 4 m16n8k16 over the 64 dims;
//   output  O[16 x 64] += P V_w:      8 m16n8k8 (one per 8 dims), P = the scores' C fragment as bf16.
// A dot product does not care in which order its dims come as long as both operands use the same
// one, and O's columns may be any permutation of the dims; both freedoms are spent on bank-conflict
// free shared-memory reads of the unswizzled 128-byte rows the bulk copy lays down:
//   K: lane (g, q) reads dims 16q..16q+15 of key g (two 16-byte loads; odd g reads its halves in
//      the other order, so each quarter warp touches all 32 banks), k-index 2q+e of step s is dim
//      16q + 4s + e, 2q+8+e is 16q + 4s + 2 + e (the same for Q);
//   V: lane (g, q) needs dims 8g..8g+7 of keys 2q and 2q+1 (n-tile j, column g is dim 8g + j); it
//      reads them word by word, lane (g, q) starting at word q of its four, so that all 32 lanes
//      hit 32 banks, then rotates the words back and pairs the two keys with byte permutes.
// So lane (g, q) ends with head g's output at dims 16q + j (c0 of n-tile j) and 16q + 8 + j (c1).
// Scores are kept in log2 units (log2(e) / 8 folded into one multiply), so exp is one ex2.
//
// Rows past L in the last tile hold whatever the caller's cache holds (NaN included): their scores
// are masked to -inf after the mma (a select, so a NaN score is harmless) and their V words are
// zeroed (P = 0 would not do: 0 * NaN = NaN in the tensor core).
//
// At the end of a split the warps' (m, l, acc) meet in smem and merge into the split's
// unnormalized output with its max and sum. With one split per (sequence, KV head) (B >= 9 at 132
// blocks) that is the answer: o = acc / l is stored directly, with no second grid barrier. Else
// the records go to the `splits` workspace; after a grid barrier, each output element combines its
// splits: sum_s 2^(m_s - M) o_s / sum_s 2^(m_s - M) l_s.

#include <cuda_bf16.h>

#include "llama_splits.cuh"

namespace {
using llama_splits::fast_exp2;
using llama_splits::kGroup;        // query heads per KV head
using llama_splits::kPartRow;      // a warp's head in `partial`
constexpr int kTile = 64;       // keys per tile
constexpr int kWarps = 8;       // warps that consume (the `empty` arrivals); warp w owns keys 8w..8w+7
constexpr float kScoreScale = 0.125f * 1.4426950408889634f;  // 1 / sqrt(64) and log2(e): scores in log2 units

// Whether the phase of `bar` with parity `parity` has completed, without waiting (test_wait: no
// suspension, unlike try_wait), for the producer's look-ahead.
__device__ __forceinline__ bool mbar_ready(uint32_t bar, unsigned parity) {
  uint32_t ok;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
      : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
  return ok != 0;
}

// D = A B + D on the tensor cores, bf16 in, fp32 sums. A's rows 8..15 are zero here (a1 = a3 = 0);
// D's rows 8..15 (d2, d3) are carried along (an mma writes whole register tuples), never read.
__device__ __forceinline__ void mma_k16(float4& d, const uint4& a, unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d.x), "+f"(d.y), "+f"(d.z), "+f"(d.w)
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mma_k8(float4& d, unsigned a0, unsigned a1, unsigned b0) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
      : "+f"(d.x), "+f"(d.y), "+f"(d.z), "+f"(d.w)
      : "r"(a0), "r"(a1), "r"(b0));
}

// The block's walk over its items' tiles, in order: items blockIdx.x, + gridDim.x, ...; split s
// of an item covers tiles [s * per, min((s + 1) * per, tiles)), never none (splits = ceil(tiles / per)).
// `row`: the tile's first element in the caches.
struct Walk {
  int item, tile, end, items, splits, per, tiles, lmax;
  size_t row;
  __device__ void start(int first) {
    item = first;
    bounds();
  }
  __device__ void bounds() {
    if (item >= items) return;
    tile = item % splits * per;
    end = min(tile + per, tiles);
    row = (static_cast<size_t>(item / splits) * lmax + static_cast<size_t>(tile) * kTile) * 64;
  }
  __device__ bool done() const { return item >= items; }
  __device__ void advance() {
    row += kTile * 64;
    if (++tile >= end) {
      item += gridDim.x;
      bounds();
    }
  }
};
}  // namespace

extern "C" __device__ void llama_attn_long(pl_ctx ctx, pl_bind_attn_long b) {
  const int warp = ctx.thread / 32, lane = ctx.thread % 32, g = lane / 4, q = lane % 4;
  const int stages = b.kv_stages;
  const int n_keys = b.L + 1, tiles = (n_keys + kTile - 1) / kTile;
  const int pairs = b.B * 8;
  const auto [per, splits, items] = llama_splits::split_context(tiles, pairs);
  const __nv_bfloat16* q_all = reinterpret_cast<const __nv_bfloat16*>(b.q);
  const __nv_bfloat16* k_all = reinterpret_cast<const __nv_bfloat16*>(b.k_cache);
  const __nv_bfloat16* v_all = reinterpret_cast<const __nv_bfloat16*>(b.v_cache);
  __nv_bfloat16* o_all = reinterpret_cast<__nv_bfloat16*>(b.o);
  float* split_out = reinterpret_cast<float*>(b.splits);  // [pairs * splits][4][66]
  float* partial = reinterpret_cast<float*>(ctx.smem + b.partial);  // [8 warps][4 heads][68]
  const unsigned char* ring = ctx.smem + b.ring;

  Walk producer{0, 0, 0, items, splits, per, tiles, b.Lmax, 0};
  producer.start(blockIdx.x);
  int issued = 0, used = 0;  // ring positions: tiles issued by thread 0; tiles this warp consumed
  int stage = 0;             // used % stages
  unsigned phase = 0;        // (used / stages) & 1: the parity of the `full` phase that brings tile `used`

  // Thread 0 keeps up to `stages` tiles in flight. It waits for a stage to be freed only when the
  // tile it is about to consume itself is not issued yet (`block`); otherwise a stage a slower warp
  // still reads is left for a later call. `early`: before the first grid barrier, the tile holding
  // row L (the last of a pair, being appended by llama_qkv_rope) is not issued yet.
  auto issue = [&](bool block, bool early) {
    while (!producer.done() && issued < used + stages) {
      if (early && producer.tile == tiles - 1) return;
      const int slot = issued % stages;
      const uint32_t empty = pl_mbar(ctx, b.empty, slot);
      const unsigned parity = ((issued / stages) & 1) ^ 1;
      if (block && issued == used) pl_mbar_wait(empty, parity);
      else if (!mbar_ready(empty, parity)) return;
      const uint32_t full = pl_mbar(ctx, b.full, slot);
      pl_mbar_arrive_expect_tx(full, 16384);
      const uint32_t dst = pl_smem_addr(ring + slot * 16384);
      pl_bulk_g2s(dst, k_all + producer.row, 8192, full);
      pl_bulk_g2s(dst + 8192, v_all + producer.row, 8192, full);
      producer.advance();
      ++issued;
    }
  };

  // The previous phase's smem accesses (generic proxy) come before the ring's bulk writes (async proxy).
  pl_fence_proxy_async();
  __syncthreads();
  if (ctx.thread == 0) {
    issue(false, true);  // the cache rows before L are the caller's: copy them during the barrier
    pl_grid_barrier(b.arrived);  // q and the appended K/V rows are stored
    asm volatile("fence.proxy.async.global;" ::: "memory");  // ... and are read by the bulk copies
  }
  __syncthreads();

  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int pair = item / splits, seq = pair / 8, kv = pair % 8;
    const int first = item % splits * per, end = min(first + per, tiles);
    float m = -INFINITY, l = 0.f;  // head g's running max (log2 units) and this lane's part of its sum
    float4 acc[8];                 // head g, dims 16q + j (.x) and 16q + 8 + j (.y); .z, .w: rows 8..15, 0
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[j] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (warp < kWarps) {
      // A fragments: lane (g, q) holds head g's dims 16q..16q+15 (words 8q..8q+7); heads 4..15 zero.
      uint4 qlo = make_uint4(0u, 0u, 0u, 0u), qhi = qlo;
      if (g < kGroup) {
        const uint4* qrow = reinterpret_cast<const uint4*>(q_all + (static_cast<size_t>(seq) * 32 + kv * kGroup + g) * 64);
        qlo = qrow[2 * q];
        qhi = qrow[2 * q + 1];
      }
      const uint4 qa[4] = {make_uint4(qlo.x, 0u, qlo.y, 0u), make_uint4(qlo.z, 0u, qlo.w, 0u),  // step s: words
                           make_uint4(qhi.x, 0u, qhi.y, 0u), make_uint4(qhi.z, 0u, qhi.w, 0u)}; // 8q+2s, 8q+2s+1
      // This lane's bytes in a stage. K: key 8w + g, dims 16q..16q+15 as two 16-byte loads, odd g
      // the second first, so that a quarter warp's 8 loads hit 8 distinct 16-byte columns.
      const bool odd = g & 1;
      const int k_first = (warp * 8 + g) * 128 + 32 * q + 16 * odd, k_second = k_first + 16 - 32 * odd;
      // V: keys 8w + 2q (a) and 8w + 2q + 1 (b, 128 bytes on), dims 8g..8g+7 (words 4g..4g+3), word
      // 4g + ((i + q) & 3) at load i: 32 lanes, 32 banks.
      int v_at[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) v_at[i] = 8192 + (warp * 8 + 2 * q) * 128 + 4 * (4 * g + ((i + q) & 3));
      for (int tile = first; tile < end; ++tile) {
        if (ctx.thread == 0) issue(true, false);
        pl_mbar_wait(pl_mbar(ctx, b.full, stage), phase);
        const unsigned char* st = ring + stage * 16384;
        const uint4 k0 = *reinterpret_cast<const uint4*>(st + k_first), k1 = *reinterpret_cast<const uint4*>(st + k_second);
        unsigned va[4], vb[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          va[i] = *reinterpret_cast<const unsigned*>(st + v_at[i]);
          vb[i] = *reinterpret_cast<const unsigned*>(st + v_at[i] + 128);
        }
        __syncwarp();  // every lane's reads come before the release
        if (lane == 0) pl_mbar_arrive(pl_mbar(ctx, b.empty, stage));  // the stage is in registers
        ++used;
        if (++stage == stages) {
          stage = 0;
          phase ^= 1u;
        }

        const uint4 klo = odd ? k1 : k0, khi = odd ? k0 : k1;  // dims 16q..16q+7, 16q+8..16q+15
        const unsigned kb[8] = {klo.x, klo.y, klo.z, klo.w, khi.x, khi.y, khi.z, khi.w};
        // Scores of keys 8w + 2q (.x) and 8w + 2q + 1 (.y) for head g: two chains of two steps.
        float4 s1 = make_float4(0.f, 0.f, 0.f, 0.f), s2 = s1;
        mma_k16(s1, qa[0], kb[0], kb[1]);
        mma_k16(s2, qa[2], kb[4], kb[5]);
        mma_k16(s1, qa[1], kb[2], kb[3]);
        mma_k16(s2, qa[3], kb[6], kb[7]);
        float2 s = make_float2((s1.x + s2.x) * kScoreScale, (s1.y + s2.y) * kScoreScale);

        // Rotate V's words back (word w of the four at index w), then pair the keys per dim.
        unsigned ra[4], rb[4];
#pragma unroll
        for (int w = 0; w < 4; ++w) {  // by q & 1
          ra[w] = (q & 1) ? va[(w + 3) & 3] : va[w];
          rb[w] = (q & 1) ? vb[(w + 3) & 3] : vb[w];
        }
#pragma unroll
        for (int w = 0; w < 4; ++w) {  // by q & 2
          va[w] = (q & 2) ? ra[(w + 2) & 3] : ra[w];
          vb[w] = (q & 2) ? rb[(w + 2) & 3] : rb[w];
        }

        const int valid = n_keys - (tile * kTile + warp * 8);  // this warp's keys 0 .. valid - 1 exist
        if (valid < 8) {  // the pair's last tile: rows past L are garbage, maybe NaN
          if (2 * q >= valid) {
            s.x = -INFINITY;
#pragma unroll
            for (int w = 0; w < 4; ++w) va[w] = 0u;
          }
          if (2 * q + 1 >= valid) {
            s.y = -INFINITY;
#pragma unroll
            for (int w = 0; w < 4; ++w) vb[w] = 0u;
          }
        }

        // Online softmax over this warp's 8 keys: the row max over the quad's lanes.
        float mx = fmaxf(s.x, s.y);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m, mx);
        const float ref = m_new == -INFINITY ? 0.f : m_new;  // no key yet: every p is 0, not NaN
        const float alpha = fast_exp2(m - ref);              // 0 on the first keys (m = -inf)
        m = m_new;
        const __nv_bfloat162 p = __floats2bfloat162_rn(fast_exp2(s.x - ref), fast_exp2(s.y - ref));
        const float2 pf = __bfloat1622float2(p);  // the sum of what the mma weights with
        l = fmaf(l, alpha, pf.x + pf.y);
        const unsigned pa = *reinterpret_cast<const unsigned*>(&p);  // A: row g, keys 2q, 2q + 1
        if (__any_sync(0xffffffffu, alpha != 1.f)) {  // once the maxima settle, rarely
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            acc[j].x *= alpha;
            acc[j].y *= alpha;
          }
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const unsigned sel = (j & 1) ? 0x7632u : 0x5410u;  // dim 8g + j of key a (low), key b (high)
          mma_k8(acc[j], pa, 0u, __byte_perm(va[j / 2], vb[j / 2], sel));
        }
      }
      // The quad's four parts of the sum (the same m, so the same rescales), then this warp's record.
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      if (g < kGroup) {
        float* row = partial + (warp * kGroup + g) * kPartRow;
        float4* at = reinterpret_cast<float4*>(row + 16 * q);
        at[0] = make_float4(acc[0].x, acc[1].x, acc[2].x, acc[3].x);
        at[1] = make_float4(acc[4].x, acc[5].x, acc[6].x, acc[7].x);
        at[2] = make_float4(acc[0].y, acc[1].y, acc[2].y, acc[3].y);
        at[3] = make_float4(acc[4].y, acc[5].y, acc[6].y, acc[7].y);
        if (q == 0) {
          row[64] = m;
          row[65] = l;
        }
      }
    }
    if (ctx.thread == 0) issue(false, false);  // the next item's tiles stream in during the merge
    __syncthreads();
    llama_splits::merge_warps(ctx.thread, partial, splits, item, seq, kv, split_out, o_all);
    __syncthreads();  // the records are read before the next split writes them
  }
  pl_fence_proxy_async();  // this phase's smem reads come before the next phase's bulk writes
  if (splits == 1) return;  // every output is stored (the same in every block: no barrier to skip alone)
  __syncthreads();
  if (ctx.thread == 0) pl_grid_barrier(b.arrived);  // every split is written
  __syncthreads();
  llama_splits::combine(ctx.thread, split_out, o_all, b.B, splits);
}

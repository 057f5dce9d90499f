// attn_short: decode attention for short contexts, a whole-block phase after llama_qkv_rope.
//
//   o[b, h, :] = softmax_j(q[b, h] . K[b, h / 4, j] / 8) V[b, h / 4, j],  j = 0 .. L
//
// A grid barrier first (every q row and cache append is stored); the first chunk of each warp's first
// item is loaded while the block waits there, all but row L (the one llama_qkv_rope appends in the same
// launch), so at L = 16 the K/V round trip is off the path after the barrier. Then each warp of the grid takes
// one (sequence, KV head) at a time and walks its keys in chunks of 32 with an online softmax, no
// block barrier anywhere: lane j scores key c0 + j against the group's four query heads (its K row
// read whole, 8 x 16 bytes; the heads from shared memory, where every lane reads the same address),
// the chunk's max and sum per head are two warp reductions, and lane l sums dims 2l, 2l + 1 of the
// four heads' outputs over the chunk's V rows (each row one coalesced 128-byte read, all of the
// chunk's issued with its K rows), taking each key's probabilities from its lane by shuffle. At
// batch 64, 512 items for 1056 warps: one round.
// Built for contexts of tens to a few hundred keys; at thousands, one warp per item is the
// bottleneck that attn_long's split-KV removes.

#include <cuda_bf16.h>

namespace {
constexpr int kGroup = 4;  // query heads per KV head

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
}  // namespace

extern "C" __device__ void llama_attn_short(pl_ctx ctx, pl_bind_attn_short b) {
  const int warp = ctx.thread / 32, lane = ctx.thread % 32, warps = blockDim.x / 32;
  float* qs = reinterpret_cast<float*>(ctx.smem + b.q_heads) + warp * kGroup * 64;  // [4][64], this warp's
  const int n = b.L + 1;
  const __nv_bfloat16* q_all = reinterpret_cast<const __nv_bfloat16*>(b.q);
  const __nv_bfloat16* k_all = reinterpret_cast<const __nv_bfloat16*>(b.k_cache);
  const __nv_bfloat16* v_all = reinterpret_cast<const __nv_bfloat16*>(b.v_cache);
  __nv_bfloat16* o_all = reinterpret_cast<__nv_bfloat16*>(b.o);
  const auto base_of = [&](int item) { return static_cast<size_t>(item) * b.Lmax * 64; };  // (seq, kv) = item / 8, % 8

  // A chunk's operands: lane l's V words (dims 2l, 2l + 1 of each of the chunk's keys) and lane j's K row (key c0 + j).
  __nv_bfloat162 vw[32];
  uint4 kp[8];
  // Issues the loads of the chunk's rows lo .. upto - 1 (V words of rows from upto on are zeros, their K rows not
  // read; rows before lo keep what an earlier call loaded). The V words do not depend on the scores, so their loads
  // are in flight with K's: one round trip for both.
  const auto load_chunk = [&](size_t base, int c0, int lo, int upto) {
    const __nv_bfloat16* vrow = v_all + base + static_cast<size_t>(c0) * 64 + 2 * lane;
#pragma unroll
    for (int jj = 0; jj < 32; ++jj) {
      if (c0 + jj >= upto) vw[jj] = __float2bfloat162_rn(0.f);
      else if (c0 + jj >= lo) vw[jj] = *reinterpret_cast<const __nv_bfloat162*>(vrow + jj * 64);
    }
    if (c0 + lane >= lo && c0 + lane < upto) {
      const uint4* krow = reinterpret_cast<const uint4*>(k_all + base + static_cast<size_t>(c0 + lane) * 64);
#pragma unroll
      for (int i = 0; i < 8; ++i) kp[i] = __ldcg(krow + i);  // all eight in flight; through L2: row L is this launch's
    }
  };

  // Before the grid barrier: the first chunk of this warp's first item, all but row L. Rows before L are the caller's
  // (llama_qkv_rope appends row L during this launch), so their round trip (from HBM when L2 is cold) runs while the
  // block waits at the barrier instead of after it; row L and q are read after it.
  const int first_item = blockIdx.x * warps + warp;
  if (first_item < b.B * 8) load_chunk(base_of(first_item), 0, 0, b.L);
  __syncthreads();
  if (ctx.thread == 0) pl_grid_barrier(b.arrived);  // q and the appended K/V rows are stored
  __syncthreads();
  for (int item = first_item; item < b.B * 8; item += gridDim.x * warps) {
    const int seq = item / 8, kv = item % 8;
    __syncwarp();  // the previous item's heads are read
#pragma unroll
    for (int h = 0; h < kGroup; ++h) {
      const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(
          q_all + (static_cast<size_t>(seq) * 32 + kv * kGroup + h) * 64 + 2 * lane));
      *reinterpret_cast<float2*>(qs + h * 64 + 2 * lane) = make_float2(v.x * 0.125f, v.y * 0.125f);  // 1 / sqrt(64)
    }
    __syncwarp();
    const size_t base = base_of(item);
    float m[kGroup], l[kGroup];
    float2 acc[kGroup];
#pragma unroll
    for (int h = 0; h < kGroup; ++h) {
      m[h] = -INFINITY;
      l[h] = 0.f;
      acc[h] = make_float2(0.f, 0.f);
    }
    for (int c0 = 0; c0 < n; c0 += 32) {
      const int j = c0 + lane, keys = min(32, n - c0);
      if (item != first_item || c0 != 0)
        load_chunk(base, c0, c0, n);
      else
        load_chunk(base, 0, b.L, n);  // loaded before the barrier, all but row L (nothing more when L >= 32)
      float s[kGroup] = {};
      if (j < n) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const unsigned words[4] = {kp[i].x, kp[i].y, kp[i].z, kp[i].w};
#pragma unroll
          for (int w = 0; w < 4; ++w) {
            const float2 k = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&words[w]));
#pragma unroll
            for (int h = 0; h < kGroup; ++h) {
              const float2 qv = *reinterpret_cast<const float2*>(qs + h * 64 + 8 * i + 2 * w);
              s[h] = fmaf(qv.x, k.x, fmaf(qv.y, k.y, s[h]));
            }
          }
        }
      }
      float p[kGroup];
#pragma unroll
      for (int h = 0; h < kGroup; ++h) {
        const float sh = j < n ? s[h] : -INFINITY;
        const float m_new = fmaxf(m[h], warp_max(sh));  // finite: key c0 < n is valid
        const float scale = __expf(m[h] - m_new);       // 0 on the first chunk (m = -inf)
        p[h] = j < n ? __expf(sh - m_new) : 0.f;
        l[h] = l[h] * scale + warp_sum(p[h]);
        acc[h].x *= scale;
        acc[h].y *= scale;
        m[h] = m_new;
      }
#pragma unroll
      for (int jj = 0; jj < 32; ++jj) {
        if (jj >= keys) break;  // warp-uniform
        const float2 v = __bfloat1622float2(vw[jj]);
#pragma unroll
        for (int h = 0; h < kGroup; ++h) {
          const float pj = __shfl_sync(0xffffffffu, p[h], jj);
          acc[h].x = fmaf(pj, v.x, acc[h].x);
          acc[h].y = fmaf(pj, v.y, acc[h].y);
        }
      }
    }
#pragma unroll
    for (int h = 0; h < kGroup; ++h) {
      const float inv = __fdividef(1.f, l[h]);  // l >= 1 (the largest term is 1); no slow-path call
      *reinterpret_cast<__nv_bfloat162*>(o_all + (static_cast<size_t>(seq) * 32 + kv * kGroup + h) * 64 + 2 * lane) =
          __floats2bfloat162_rn(acc[h].x * inv, acc[h].y * inv);
    }
  }
}

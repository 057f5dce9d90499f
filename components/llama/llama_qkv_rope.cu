// llama_qkv_rope: the decode block's first whole-block phase.
//
//   [q | k | v] = x Wqkv^T     x [B, 2048], Wqkv [3072, 2048]: 32 query heads, then 8 K, then 8 V heads
//   q, k        = RoPE at position L (pairs (i, i + 32) of each head, Llama's rotate_half)
//   k_cache[b, h, L, :] = k,  v_cache[b, h, L, :] = v,  q -> workspace [B, 32, 64]
//
// A block takes one head's 64 weight rows at a time (48 heads over the grid), so each RoPE pair is
// in one block (blocks of at least 4 warps). x is staged in shared memory 256 columns at a time;
// each warp computes an 8-column slice (mma.sync m16n8k16 bf16 -> fp32) for every row, its weight rows read straight from global
// memory with 16-byte loads. Within each 32-wide k chunk, lane q loads k = 8q..8q+7 of x and of W
// alike and feeds them to two k16 steps: a sum does not care in which order its k come. Decode is
// memory-bound: the 12 MB of Wqkv are read once.

#include <cuda_bf16.h>

namespace {
constexpr int kChunk = 256;  // x columns per staged chunk
constexpr int kStride = 264; // staged row stride in elements
constexpr int kHeads = 48;   // 32 q + 8 k + 8 v heads of 64 rows

__device__ __forceinline__ void mma_bf16(float (&c)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                         unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// cos and sin of L * inv_freq, reduced to [-pi, pi] in double first (angles reach thousands of
// radians; the fast intrinsics are accurate only near zero, the precise ones use local memory).
__device__ __forceinline__ void rope_angle(int pos, float inv_freq, float* s, float* c) {
  const double a = static_cast<double>(pos) * inv_freq;
  const double two_pi = 6.283185307179586, inv_two_pi = 0.15915494309189535;  // no division: its slow path is a call
  const float r = static_cast<float>(a - rint(a * inv_two_pi) * two_pi);
  __sincosf(r, s, c);
}
}  // namespace

extern "C" __device__ void llama_qkv_rope(pl_ctx ctx, pl_bind_llama_qkv_rope b) {
  __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(ctx.smem + b.x_chunk);
  float* head = reinterpret_cast<float*>(ctx.smem + b.head);  // [64 rows][64 columns]
  const int warp = ctx.thread / 32, lane = ctx.thread % 32, warps = blockDim.x / 32;
  const int g = lane / 4, q = lane % 4;
  const int m_tiles = (b.B + 15) / 16;
  __nv_bfloat16* q_out = reinterpret_cast<__nv_bfloat16*>(b.q);
  for (int task = blockIdx.x; task < kHeads; task += gridDim.x) {
    // Eight 8-column slices: one per warp in a block of 8 warps, two per warp in a block of 4;
    // every thread stages x and meets every barrier, with or without a slice.
    float acc[2][4][4] = {};
    for (int k0 = 0; k0 < b.D; k0 += kChunk) {
      __syncthreads();  // the previous chunk is read
      for (int i = ctx.thread; i < m_tiles * 16 * (kChunk / 8); i += blockDim.x) {
        const int r = i / (kChunk / 8), c = i % (kChunk / 8);
        const int4 v = r < b.B ? *reinterpret_cast<const int4*>(b.x + static_cast<size_t>(r) * b.D + k0 + 8 * c)
                               : make_int4(0, 0, 0, 0);
        *reinterpret_cast<int4*>(xs + r * kStride + 8 * c) = v;
      }
      __syncthreads();
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const int slice = warp + s * warps;
        if (slice >= 8) continue;
        const __nv_bfloat16* w = b.wqkv + static_cast<size_t>(task * 64 + slice * 8 + g) * b.D + k0 + 8 * q;
#pragma unroll 2
        for (int kk = 0; kk < kChunk; kk += 32) {
          const uint4 wv = __ldg(reinterpret_cast<const uint4*>(w + kk));
#pragma unroll
          for (int mt = 0; mt < 4; ++mt) {
            if (mt < m_tiles) {
              const uint4 lo = *reinterpret_cast<const uint4*>(xs + (mt * 16 + g) * kStride + kk + 8 * q);
              const uint4 hi = *reinterpret_cast<const uint4*>(xs + (mt * 16 + g + 8) * kStride + kk + 8 * q);
              mma_bf16(acc[s][mt], lo.x, hi.x, lo.y, hi.y, wv.x, wv.y);
              mma_bf16(acc[s][mt], lo.z, hi.z, lo.w, hi.w, wv.z, wv.w);
            }
          }
        }
      }
    }
    // C fragment: rows g and g + 8 of each m-tile, columns 2q and 2q + 1 of the slice.
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int slice = warp + s * warps;
      if (slice >= 8) continue;
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) {
        if (mt < m_tiles) {
          const int c = slice * 8 + 2 * q;
          *reinterpret_cast<float2*>(head + (mt * 16 + g) * 64 + c) = make_float2(acc[s][mt][0], acc[s][mt][1]);
          *reinterpret_cast<float2*>(head + (mt * 16 + g + 8) * 64 + c) = make_float2(acc[s][mt][2], acc[s][mt][3]);
        }
      }
    }
    __syncthreads();
    // RoPE (q and k heads) and the stores: one (row, pair) per thread step.
    for (int i = ctx.thread; i < b.B * 32; i += blockDim.x) {
      const int r = i / 32, d = i % 32;
      float lo = head[r * 64 + d], hi = head[r * 64 + d + 32];
      if (task < 40) {
        float s, c;
        rope_angle(b.L, b.inv_freq[d], &s, &c);
        const float rl = lo * c - hi * s, rh = hi * c + lo * s;
        lo = rl;
        hi = rh;
      }
      __nv_bfloat16* dst;
      if (task < 32) {
        dst = q_out + (static_cast<size_t>(r) * 32 + task) * 64;
      } else {
        __nv_bfloat16* cache = task < 40 ? b.k_cache : b.v_cache;
        dst = cache + ((static_cast<size_t>(r) * 8 + (task - 32) % 8) * b.Lmax + b.L) * 64;
      }
      dst[d] = __float2bfloat16(lo);
      dst[d + 32] = __float2bfloat16(hi);
    }
    __syncthreads();  // the head buffer is free for the next task
  }
}

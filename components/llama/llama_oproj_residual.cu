// llama_oproj_residual: the decode block's last whole-block phase, after the attention.
//
//   y = x + o Wo^T     o [B, 2048] (the attention's output), Wo [2048, 2048], x the residual
//
// A grid barrier first (every attention output is stored). Then the GEMV of llama_qkv_rope: a
// block takes 64 output columns at a time (32 groups over the grid), o staged in shared memory
// 256 columns at a time, each warp an 8-column slice by mma.sync m16n8k16 (bf16 -> fp32) with its
// Wo rows read by 16-byte loads (k order within a 32-wide chunk permuted alike for o and Wo).

#include <cuda_bf16.h>

namespace {
constexpr int kChunk = 256;  // x columns per staged chunk
constexpr int kStride = 264; // staged row stride in elements
constexpr int kGroups = 32;  // 64-column groups of the output

__device__ __forceinline__ void mma_bf16(float (&c)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                         unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace

extern "C" __device__ void llama_oproj_residual(pl_ctx ctx, pl_bind_llama_oproj_residual b) {
  __syncthreads();
  if (ctx.thread == 0) pl_grid_sync(b.arrived, 1);  // every attention output is stored
  __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(ctx.smem + b.o_chunk);
  float* cols = reinterpret_cast<float*>(ctx.smem + b.cols);  // [64 rows][64 columns]
  const int warp = ctx.thread / 32, lane = ctx.thread % 32, warps = blockDim.x / 32;
  const int g = lane / 4, q = lane % 4;
  const int m_tiles = (b.B + 15) / 16;
  const __nv_bfloat16* o = reinterpret_cast<const __nv_bfloat16*>(b.o);
  const __nv_bfloat16* x = reinterpret_cast<const __nv_bfloat16*>(b.residual);
  for (int task = blockIdx.x; task < kGroups; task += gridDim.x) {
    // Eight 8-column slices: one per warp in a block of 8 warps, two per warp in a block of 4;
    // every thread stages x and meets every barrier, with or without a slice.
    float acc[2][4][4] = {};
    for (int k0 = 0; k0 < b.D; k0 += kChunk) {
      __syncthreads();  // the previous chunk is read
      for (int i = ctx.thread; i < m_tiles * 16 * (kChunk / 8); i += blockDim.x) {
        const int r = i / (kChunk / 8), c = i % (kChunk / 8);
        const int4 v = r < b.B ? *reinterpret_cast<const int4*>(o + static_cast<size_t>(r) * b.D + k0 + 8 * c)
                               : make_int4(0, 0, 0, 0);
        *reinterpret_cast<int4*>(xs + r * kStride + 8 * c) = v;
      }
      __syncthreads();
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const int slice = warp + s * warps;
        if (slice >= 8) continue;
        const __nv_bfloat16* w = b.wo + static_cast<size_t>(task * 64 + slice * 8 + g) * b.D + k0 + 8 * q;
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
          *reinterpret_cast<float2*>(cols + (mt * 16 + g) * 64 + c) = make_float2(acc[s][mt][0], acc[s][mt][1]);
          *reinterpret_cast<float2*>(cols + (mt * 16 + g + 8) * 64 + c) = make_float2(acc[s][mt][2], acc[s][mt][3]);
        }
      }
    }
    __syncthreads();
    // The residual add and the store: 64 columns of every row.
    for (int i = ctx.thread; i < b.B * 64; i += blockDim.x) {
      const int r = i / 64, c = i % 64;
      const size_t at = static_cast<size_t>(r) * b.D + task * 64 + c;
      b.y[at] = __float2bfloat16(__bfloat162float(x[at]) + cols[r * 64 + c]);
    }
    __syncthreads();  // the column buffer is free for the next group
  }
}

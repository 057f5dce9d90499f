// llama_gemv.cuh: the skinny GEMM both projections of the decode block run (llama_qkv_rope,
// llama_oproj_residual): 64 weight rows against every row of a [rows <= 64, depth] activation.
//
// The activation is staged in shared memory 256 columns at a time (rows padded to 264 elements: a
// 528-byte stride puts the 16-byte fragment loads of 8 rows in 8 different bank groups); each of
// eight 8-column slices is one warp's (two a warp in a block of 4 warps), by mma.sync m16n8k16
// (bf16 in, fp32 sums), its weight rows read straight from global memory with 16-byte loads.
// Within each 32-wide k chunk, lane q loads k = 8q..8q+7 of the activation and of the weights
// alike and feeds them to two k16 steps: a sum does not care in which order its k come.
// Every thread of the block calls it (it stages and meets every barrier); the result lands in
// `out`, fp32 [64 rows][64 columns], complete when it returns.
// No include guard: the monolithic control compiles each component's source in a namespace of its
// own, and both projections' copies of this header must be seen there (a guard would hide one).

#include <cuda_bf16.h>

namespace llama_gemv {
constexpr int kChunk = 256;  // activation columns per staged chunk
constexpr int kStride = 264; // staged row stride in elements

__device__ __forceinline__ void mma_bf16(float (&c)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                         unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// out[r][c] = sum_k act[r][k] * weight[row0 + c][k] for r < rows, c < 64 (act [rows, depth], weight
// [*, depth], both bf16 row-major; depth a multiple of 256).
__device__ __forceinline__ void rows_times_64(int thread, __nv_bfloat16* xs, float* out, const __nv_bfloat16* act,
                                              const __nv_bfloat16* weight, int rows, int depth, int row0) {
  const int warp = thread / 32, lane = thread % 32, warps = blockDim.x / 32;
  const int g = lane / 4, q = lane % 4;
  const int m_tiles = (rows + 15) / 16;
  float acc[2][4][4] = {};
  for (int k0 = 0; k0 < depth; k0 += kChunk) {
    __syncthreads();  // the previous chunk is read
    for (int i = thread; i < m_tiles * 16 * (kChunk / 8); i += blockDim.x) {
      const int r = i / (kChunk / 8), c = i % (kChunk / 8);
      const int4 v = r < rows ? *reinterpret_cast<const int4*>(act + static_cast<size_t>(r) * depth + k0 + 8 * c)
                             : make_int4(0, 0, 0, 0);
      *reinterpret_cast<int4*>(xs + r * kStride + 8 * c) = v;
    }
    __syncthreads();
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int slice = warp + s * warps;
      if (slice >= 8) continue;
      const __nv_bfloat16* w = weight + static_cast<size_t>(row0 + slice * 8 + g) * depth + k0 + 8 * q;
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
        *reinterpret_cast<float2*>(out + (mt * 16 + g) * 64 + c) = make_float2(acc[s][mt][0], acc[s][mt][1]);
        *reinterpret_cast<float2*>(out + (mt * 16 + g + 8) * 64 + c) = make_float2(acc[s][mt][2], acc[s][mt][3]);
      }
    }
  }
  __syncthreads();  // out is complete
}
}  // namespace llama_gemv

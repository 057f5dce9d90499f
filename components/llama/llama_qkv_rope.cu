// llama_qkv_rope: the decode block's first whole-block phase.
//
//   [q | k | v] = x Wqkv^T     x [B, 2048], Wqkv [3072, 2048]: 32 query heads, then 8 K, then 8 V heads
//   q, k        = RoPE at position L (pairs (i, i + 32) of each head, Llama's rotate_half)
//   k_cache[b, h, L, :] = k,  v_cache[b, h, L, :] = v,  q -> workspace [B, 32, 64]
//
// The projection is llama_gemv.cuh's: the 48 heads' 64-row groups, or parts of them (the fact gemv_rows), are spread
// over the blocks (the fact gemv_split), and each unit reaches the epilogue below complete, in one block; a unit holds
// whole RoPE pairs (i, i + 32). Decode is memory-bound: the 12 MB of Wqkv are read once.

#include <cuda_bf16.h>

#include "llama_gemv.cuh"

namespace {
constexpr int kHeads = 48;  // 32 q + 8 k + 8 v heads of 64 rows

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
  const llama_gemv::Buffers bufs{ctx.smem, b.ring, b.head, b.full, b.empty,
                                 reinterpret_cast<float*>(b.partials), reinterpret_cast<unsigned*>(b.counts),
                                 static_cast<int>(b.gemv_split), static_cast<int>(b.gemv_slices),
                                 static_cast<int>(b.gemv_rows), static_cast<int>(b.gemv_stages),
                                 static_cast<int>(b.gemv_act_smem), b.act, /*act_written=*/false,
                                 static_cast<int>(b.gemv_core), static_cast<int>(b.cluster_ctas), b.half};
  __nv_bfloat16* q_out = reinterpret_cast<__nv_bfloat16*>(b.q);
  // head: the head's projected columns for every row, fp32 (those of the pairs (d, d + 32), d in lo .. lo + width - 1:
  // a unit of the fact gemv_rows); RoPE on each pair, then the stores.
  // The block's 256 threads (block_threads) are a multiple of width (8, 16 or 32), so each thread keeps one pair d
  // for all its rows: its angle is computed once, not once a row.
  // Lane l's inverse frequency, loaded now, with the projection's first weights: read in the epilogue, it was one more
  // round trip (from HBM when L2 is cold) between the last mma and the stores. The epilogue takes pair d's by shuffle.
  const float inv_freq_lane = b.inv_freq[ctx.thread % 32];
  llama_gemv::run(ctx.thread, bufs, b.x, b.wqkv, b.B, b.D, kHeads, 0, [&](int task, int lo, int width, const float* head) {
    const int d = lo + ctx.thread % width;
    const float inv_freq = __shfl_sync(0xffffffffu, inv_freq_lane, d);  // every thread runs the epilogue
    float s = 0.f, c = 1.f;
    if (task < 40 && ctx.thread < b.B * width) rope_angle(b.L, inv_freq, &s, &c);
    for (int i = ctx.thread; i < b.B * width; i += blockDim.x) {
      const int r = i / width;
      float x0 = head[llama_gemv::out_at(r, d)], x1 = head[llama_gemv::out_at(r, d + 32)];
      if (task < 40) {
        const float r0 = x0 * c - x1 * s, r1 = x1 * c + x0 * s;
        x0 = r0;
        x1 = r1;
      }
      __nv_bfloat16* dst;
      if (task < 32) {
        dst = q_out + (static_cast<size_t>(r) * 32 + task) * 64;
      } else {
        __nv_bfloat16* cache = task < 40 ? b.k_cache : b.v_cache;
        dst = cache + ((static_cast<size_t>(r) * 8 + (task - 32) % 8) * b.Lmax + b.L) * 64;
      }
      dst[d] = __float2bfloat16(x0);
      dst[d + 32] = __float2bfloat16(x1);
    }
  });
}

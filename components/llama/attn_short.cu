// attn_short: decode attention for short contexts, a whole-block phase after llama_qkv_rope.
//
//   o[b, h, :] = softmax_j(q[b, h] . K[b, h / 4, j] / 8) V[b, h / 4, j],  j = 0 .. L
//
// A grid barrier first (every q row and cache append is stored). Then a block takes one
// (sequence, KV head) at a time: lane l holds dims 2l, 2l + 1 of the group's four query heads;
// each warp scores its share of the keys (one 128-byte K row per step, a warp sum per head), the
// first four warps turn one head's scores into probabilities each, and each warp sums its keys'
// V rows weighted by them; the warps' partial outputs meet in shared memory.

#include <cuda_bf16.h>

namespace {
constexpr int kGroup = 4;  // query heads per KV head
constexpr int kSlots = 16; // partial outputs reduced 16 warps at a time

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
  __syncthreads();
  if (ctx.thread == 0) pl_grid_sync(b.arrived, 1);  // q and the appended K/V rows are stored
  __syncthreads();
  float* scores = reinterpret_cast<float*>(ctx.smem + b.scores);    // [4][Lmax]
  float* partial = reinterpret_cast<float*>(ctx.smem + b.partial);  // [16][4][64], then [4] inverse sums
  float* inv_sum = partial + kSlots * kGroup * 64;
  const int warp = ctx.thread / 32, lane = ctx.thread % 32, warps = blockDim.x / 32;
  const int n = b.L + 1;
  const __nv_bfloat16* q_all = reinterpret_cast<const __nv_bfloat16*>(b.q);
  const __nv_bfloat16* k_all = reinterpret_cast<const __nv_bfloat16*>(b.k_cache);
  const __nv_bfloat16* v_all = reinterpret_cast<const __nv_bfloat16*>(b.v_cache);
  __nv_bfloat16* o_all = reinterpret_cast<__nv_bfloat16*>(b.o);
  for (int item = blockIdx.x; item < b.B * 8; item += gridDim.x) {
    const int seq = item / 8, kv = item % 8;
    float2 qv[kGroup];
#pragma unroll
    for (int h = 0; h < kGroup; ++h)
      qv[h] = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(
          q_all + (static_cast<size_t>(seq) * 32 + kv * kGroup + h) * 64 + 2 * lane));
    const size_t base = (static_cast<size_t>(seq) * 8 + kv) * b.Lmax * 64;
    for (int j = warp; j < n; j += warps) {
      const float2 k = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(k_all + base + j * 64 + 2 * lane));
#pragma unroll
      for (int h = 0; h < kGroup; ++h) {
        const float s = warp_sum(qv[h].x * k.x + qv[h].y * k.y);
        if (lane == 0) scores[h * b.Lmax + j] = s * 0.125f;  // 1 / sqrt(64)
      }
    }
    __syncthreads();
    if (warp < kGroup) {  // warp h: head h's softmax (unnormalized exp; 1 / sum kept aside)
      float* row = scores + warp * b.Lmax;
      float m = -INFINITY;
      for (int j = lane; j < n; j += 32) m = fmaxf(m, row[j]);
      m = warp_max(m);
      float sum = 0.f;
      for (int j = lane; j < n; j += 32) {
        const float e = __expf(row[j] - m);
        row[j] = e;
        sum += e;
      }
      sum = warp_sum(sum);
      if (lane == 0) inv_sum[warp] = __fdividef(1.f, sum);  // sum >= 1 (the largest term is 1); no slow-path call
    }
    __syncthreads();
    float2 acc[kGroup] = {};
    for (int j = warp; j < n; j += warps) {
      const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(v_all + base + j * 64 + 2 * lane));
#pragma unroll
      for (int h = 0; h < kGroup; ++h) {
        const float p = scores[h * b.Lmax + j];
        acc[h].x = fmaf(p, v.x, acc[h].x);
        acc[h].y = fmaf(p, v.y, acc[h].y);
      }
    }
    // Partial outputs meet in 16 slots, 16 warps a round (blocks of up to 16 warps: one round).
    for (int first = 0; first < warps; first += kSlots) {
      if (warp >= first && warp < first + kSlots) {
        float* slot = partial + (warp - first) * kGroup * 64;
#pragma unroll
        for (int h = 0; h < kGroup; ++h) {
          float2* at = reinterpret_cast<float2*>(slot + h * 64 + 2 * lane);
          *at = first == 0 ? acc[h] : make_float2(at->x + acc[h].x, at->y + acc[h].y);
        }
      }
      __syncthreads();
    }
    const int used = min(warps, kSlots);
    for (int i = ctx.thread; i < kGroup * 64; i += blockDim.x) {
      const int h = i / 64, d = i % 64;
      float sum = 0.f;
      for (int w = 0; w < used; ++w) sum += partial[(w * kGroup + h) * 64 + d];
      o_all[(static_cast<size_t>(seq) * 32 + kv * kGroup + h) * 64 + d] = __float2bfloat16(sum * inv_sum[h]);
    }
    __syncthreads();  // scores and partials are free for the next item
  }
}

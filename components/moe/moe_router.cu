// moe_router: the MoE layer's router, a whole-block phase before the expert GEMM's tile loops.
//
//   logits[t, e] = sum_h x[t, h] * wr[e, h]   (exact products of bf16 values, fp32 sums)
//   ids[t, :]     = the topk largest logits of token t, in descending order, ties to the lower id
//   weights[t, :] = softmax over those topk logits
//
// The logits are a small GEMM ([T, H] x [H, E<=128]) on the tensor cores (mma.sync m16n8k16, bf16
// in, fp32 accumulate): a block takes 32 tokens per round, so at 4096 tokens 128 of the 132 blocks
// share the work. Eight warps each compute a 16-token x 32-expert slice straight from global memory
// (16-byte loads, four lanes to a 64-byte row chunk) and leave it in shared memory;
// then each warp takes whole tokens: lane l holds the logits of experts l, l + 32, l + 64, l + 96,
// and top-k is k rounds of a warp arg-max. (The first version ran the logits on the CUDA cores,
// 96 tokens per block: at 4096 tokens 43 blocks worked and the rest waited at the permute's barrier.)

#include <cuda_bf16.h>

namespace {
constexpr int kTokens = 32;       // tokens per block per round
constexpr int kExperts = 128;     // logits row in shared memory: E <= 128
constexpr int kSliceTokens = 16;  // one warp's slice: 16 tokens (an m16 tile) ...
constexpr int kSliceExperts = 32; // ... by 32 experts (four n8 tiles)
constexpr int kSlices = (kTokens / kSliceTokens) * (kExperts / kSliceExperts);  // 8, one per warp
constexpr int kPerLane = kExperts / 32;

__device__ __forceinline__ uint4 load16(const __nv_bfloat16* p) {  // eight bf16, 16-byte aligned
  return __ldg(reinterpret_cast<const uint4*>(p));
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
}  // namespace

extern "C" __device__ void moe_router_route(pl_ctx ctx, pl_bind_moe_router b) {
  float* logits = reinterpret_cast<float*>(ctx.smem + b.logits);  // [kTokens][kExperts]
  const int warp = ctx.thread / 32, lane = ctx.thread % 32;
  const int warps = blockDim.x / 32;
  const int g = lane / 4, q = lane % 4;  // the mma fragments' row (g) and column pair (q)
  int* ids = reinterpret_cast<int*>(b.ids);
  float* weights = reinterpret_cast<float*>(b.weights);
  const int rounds = (b.T + kTokens - 1) / kTokens;
  for (int round = blockIdx.x; round < rounds; round += gridDim.x) {  // every thread runs every round
    const int t_block = round * kTokens;
    __syncthreads();  // the previous round's logits are read
    for (int slice = warp; slice < kSlices; slice += warps) {  // blocks of fewer than 8 warps loop
      const int t0 = t_block + (slice / 4) * kSliceTokens, e0 = (slice % 4) * kSliceExperts;
      // A rows g and g + 8 of the slice; B columns (experts) e0 + 8j + g. Rows past T and experts
      // past E read as zero (their logits are never used). A sum does not care in which order its
      // k come, so long as A and B agree: lane q loads the 8 consecutive values 8q..8q+7 of each
      // 32-wide k chunk in one 16-byte load and feeds them to two k16 steps as the fragment's
      // columns (2q, 2q+1, 2q+8, 2q+9), values 0-3 to the first step and 4-7 to the second.
      const bool row_lo = t0 + g < b.T, row_hi = t0 + g + 8 < b.T;
      const __nv_bfloat16* x_lo = b.x + static_cast<size_t>(row_lo ? t0 + g : 0) * b.H + 8 * q;
      const __nv_bfloat16* x_hi = b.x + static_cast<size_t>(row_hi ? t0 + g + 8 : 0) * b.H + 8 * q;
      const __nv_bfloat16* w[4];
      bool w_ok[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int e = e0 + 8 * j + g;
        w_ok[j] = e < b.E;
        w[j] = b.wr + static_cast<size_t>(w_ok[j] ? e : 0) * b.H + 8 * q;
      }
      float acc[4][4] = {};
      if (e0 < b.E) {
#pragma unroll 2
        for (int k = 0; k < b.H; k += 32) {
          const uint4 lo = row_lo ? load16(x_lo + k) : uint4{}, hi = row_hi ? load16(x_hi + k) : uint4{};
          uint4 wv[4];
#pragma unroll
          for (int j = 0; j < 4; ++j) wv[j] = w_ok[j] ? load16(w[j] + k) : uint4{};
          const unsigned a0[4] = {lo.x, hi.x, lo.y, hi.y}, a1[4] = {lo.z, hi.z, lo.w, hi.w};
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            mma_bf16(acc[j], a0, wv[j].x, wv[j].y);
            mma_bf16(acc[j], a1, wv[j].z, wv[j].w);
          }
        }
      }
      // C fragment: rows g and g + 8, columns 2q and 2q + 1 of each n8 tile.
      const int r = (slice / 4) * kSliceTokens + g;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int c = e0 + 8 * j + 2 * q;
        *reinterpret_cast<float2*>(logits + r * kExperts + c) = make_float2(acc[j][0], acc[j][1]);
        *reinterpret_cast<float2*>(logits + (r + 8) * kExperts + c) = make_float2(acc[j][2], acc[j][3]);
      }
    }
    __syncthreads();
    // Top-k of each token: k rounds of a warp arg-max over (logit, -id), then the softmax.
    for (int i = warp; i < kTokens; i += warps) {
      const int t = t_block + i;
      if (t >= b.T) break;
      float l[kPerLane];
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) l[j] = 32 * j + lane < b.E ? logits[i * kExperts + 32 * j + lane] : -INFINITY;
      float top = 0.f, sum = 0.f, mine_value = 0.f;
      int mine_id = 0;
      for (int k = 0; k < b.topk; ++k) {
        float v = -INFINITY;
        int id = 0x7fffffff;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j)
          if (l[j] > v) { v = l[j]; id = 32 * j + lane; }  // j ascending: the lower id wins a tie
#pragma unroll
        for (int off = 16; off > 0; off /= 2) {
          const float ov = __shfl_xor_sync(0xffffffffu, v, off);
          const int oid = __shfl_xor_sync(0xffffffffu, id, off);
          if (ov > v || (ov == v && oid < id)) { v = ov; id = oid; }
        }
#pragma unroll
        for (int j = 0; j < kPerLane; ++j)
          if (id == 32 * j + lane) l[j] = -INFINITY;  // the winner is out of the next rounds
        if (k == 0) top = v;
        sum += expf(v - top);
        if (lane == k) { mine_value = v; mine_id = id; }
      }
      if (lane < b.topk) {
        ids[static_cast<size_t>(t) * b.topk + lane] = mine_id;
        weights[static_cast<size_t>(t) * b.topk + lane] = __fdividef(expf(mine_value - top), sum);  // no slow-path call
      }
    }
  }
}

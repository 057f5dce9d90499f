// moe_router: the MoE layer's router, a whole-block phase before the expert GEMM's tile loops.
//
//   logits[t, e] = sum_h x[t, h] * wr[e, h]   (fp32 products of bf16 values)
//   ids[t, :]     = the topk largest logits of token t, in descending order, ties to the lower id
//   weights[t, :] = softmax over those topk logits
//
// Each warp routes 8 tokens at a time, lane l holding the logits of experts l, l + 32, l + 64 and
// l + 96. The block walks the hidden dimension in chunks of 32: it stages the router weight's chunk
// in shared memory (transposed, fp32), each lane loads one hidden value of each of its 8 tokens and
// the warp broadcasts them with shuffles. Top-k is k rounds of a warp arg-max.

#include <cuda_bf16.h>

namespace {
constexpr int kChunk = 32;        // hidden columns per staged chunk
constexpr int kTokensPerWarp = 8;
constexpr int kPerLane = 4;       // experts per lane: E <= 128
}  // namespace

extern "C" __device__ void moe_router_route(pl_ctx ctx, pl_bind_moe_router b) {
  float* wr_s = reinterpret_cast<float*>(ctx.smem + b.wr_chunk);  // [kChunk][128]
  const int warp = ctx.thread / 32, lane = ctx.thread % 32;
  const int warps = blockDim.x / 32;
  const int group = warps * kTokensPerWarp;  // tokens per block per round
  int* ids = reinterpret_cast<int*>(b.ids);
  float* weights = reinterpret_cast<float*>(b.weights);
  const int rounds = (b.T + group - 1) / group;
  for (int round = blockIdx.x; round < rounds; round += gridDim.x) {  // every warp runs every round
    const int t0 = round * group + warp * kTokensPerWarp;
    float acc[kTokensPerWarp][kPerLane];
#pragma unroll
    for (int i = 0; i < kTokensPerWarp; ++i)
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) acc[i][j] = 0.f;
    for (int h0 = 0; h0 < b.H; h0 += kChunk) {
      __syncthreads();  // the previous chunk is no longer read
      for (int i = ctx.thread; i < kChunk * b.E; i += blockDim.x) {
        const int e = i / kChunk, h = i % kChunk;  // consecutive threads read consecutive h of one expert
        wr_s[h * 128 + e] = __bfloat162float(b.wr[static_cast<size_t>(e) * b.H + h0 + h]);
      }
      __syncthreads();
      float xv[kTokensPerWarp];
#pragma unroll
      for (int i = 0; i < kTokensPerWarp; ++i)
        xv[i] = t0 + i < b.T ? __bfloat162float(b.x[static_cast<size_t>(t0 + i) * b.H + h0 + lane]) : 0.f;
#pragma unroll 4
      for (int h = 0; h < kChunk; ++h) {
        float w[kPerLane];
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) w[j] = 32 * j + lane < b.E ? wr_s[h * 128 + 32 * j + lane] : 0.f;
#pragma unroll
        for (int i = 0; i < kTokensPerWarp; ++i) {
          const float xi = __shfl_sync(0xffffffffu, xv[i], h);
#pragma unroll
          for (int j = 0; j < kPerLane; ++j) acc[i][j] = fmaf(xi, w[j], acc[i][j]);
        }
      }
    }
    // Top-k of each token: k rounds of a warp arg-max over (logit, -id), then the softmax.
#pragma unroll
    for (int i = 0; i < kTokensPerWarp; ++i) {
      const int t = t0 + i;
      float l[kPerLane];
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) l[j] = 32 * j + lane < b.E ? acc[i][j] : -INFINITY;
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
      if (t < b.T && lane < b.topk) {
        ids[static_cast<size_t>(t) * b.topk + lane] = mine_id;
        weights[static_cast<size_t>(t) * b.topk + lane] = __fdividef(expf(mine_value - top), sum);  // no slow-path call
      }
    }
  }
}

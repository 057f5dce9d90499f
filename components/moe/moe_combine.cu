// moe_combine: the MoE layer's last phase, after the expert GEMM's tile loops, in every thread of
// every block. A grid barrier waits for every block's expert outputs; then each warp takes one
// token at a time and sums its topk rows, weighted, in fp32 (slot order: the same sum every run),
// 8 columns (16 bytes) per lane per step.

#include <cuda_bf16.h>

extern "C" __device__ void moe_combine_sum(pl_ctx ctx, pl_bind_moe_combine b) {
  __syncthreads();
  if (ctx.thread == 0) pl_grid_sync(b.arrived, 1);  // every expert output row is stored
  __syncthreads();
  const float* weights = reinterpret_cast<const float*>(b.weights);
  const int* token_row = reinterpret_cast<const int*>(b.token_row);
  const int warp = ctx.thread / 32, lane = ctx.thread % 32;
  const int warps = blockDim.x / 32;
  for (int t = blockIdx.x * warps + warp; t < b.T; t += gridDim.x * warps) {
    for (int c = lane; c < b.H / 8; c += 32) {
      float sum[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      for (int k = 0; k < b.topk; ++k) {
        const size_t row = token_row[b.slot_major ? static_cast<size_t>(k) * b.T + t : static_cast<size_t>(t) * b.topk + k];
        const float w = weights[static_cast<size_t>(t) * b.topk + k];
        const int4 v = *reinterpret_cast<const int4*>(b.out_rows + (row * b.H + c * 8) * 2);
        const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float2 f = __bfloat1622float2(pairs[i]);
          sum[2 * i] = fmaf(w, f.x, sum[2 * i]);
          sum[2 * i + 1] = fmaf(w, f.y, sum[2 * i + 1]);
        }
      }
      int4 out;
      __nv_bfloat162* packed = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
      for (int i = 0; i < 4; ++i) packed[i] = __floats2bfloat162_rn(sum[2 * i], sum[2 * i + 1]);
      *reinterpret_cast<int4*>(b.y + static_cast<size_t>(t) * b.H + c * 8) = out;
    }
  }
}

// llama_oproj_residual: the decode block's last whole-block phase, after the attention.
//
//   y = x + o Wo^T     o [B, 2048] (the attention's output), Wo [2048, 2048], x the residual
//
// A grid barrier first (every attention output is stored). Then llama_gemv.cuh's projection: a
// block takes 64 output columns at a time (32 groups over the grid).

#include <cuda_bf16.h>

#include "llama_gemv.cuh"

namespace {
constexpr int kGroups = 32;  // 64-column groups of the output
}  // namespace

extern "C" __device__ void llama_oproj_residual(pl_ctx ctx, pl_bind_llama_oproj_residual b) {
  __syncthreads();
  if (ctx.thread == 0) pl_grid_sync(b.arrived, 1);  // every attention output is stored
  __syncthreads();
  __nv_bfloat16* os = reinterpret_cast<__nv_bfloat16*>(ctx.smem + b.o_chunk);
  float* cols = reinterpret_cast<float*>(ctx.smem + b.cols);  // [64 rows][64 columns]
  const __nv_bfloat16* o = reinterpret_cast<const __nv_bfloat16*>(b.o);
  const __nv_bfloat16* x = reinterpret_cast<const __nv_bfloat16*>(b.residual);
  for (int task = blockIdx.x; task < kGroups; task += gridDim.x) {
    llama_gemv::rows_times_64(ctx.thread, os, cols, o, b.wo, b.B, b.D, task * 64);
    // The residual add and the store: 64 columns of every row.
    for (int i = ctx.thread; i < b.B * 64; i += blockDim.x) {
      const int r = i / 64, c = i % 64;
      const size_t at = static_cast<size_t>(r) * b.D + task * 64 + c;
      b.y[at] = __float2bfloat16(__bfloat162float(x[at]) + cols[r * 64 + c]);
    }
    __syncthreads();  // the column buffer is free for the next group
  }
}

// llama_oproj_residual: the decode block's last whole-block phase, after the attention.
//
//   y = x + o Wo^T     o [B, 2048] (the attention's output), Wo [2048, 2048], x the residual
//
// A grid barrier first (every attention output is stored); before it, this block's first chunks of Wo are
// copied into the projection's ring and the rest asked of L2. Then llama_gemv.cuh's projection: the 32 groups
// of 64 output columns, or parts of them (the fact gemv_rows), spread over the blocks (the fact gemv_split:
// whole groups, 2 or 4 blocks a group, or stream-K), each unit complete in the epilogue.

#include <cuda_bf16.h>

#include "llama_gemv.cuh"

namespace {
constexpr int kGroups = 32;  // 64-column groups of the output
}  // namespace

extern "C" __device__ void llama_oproj_residual(pl_ctx ctx, pl_bind_llama_oproj_residual b) {
  const llama_gemv::Buffers bufs{ctx.smem, b.ring, b.cols, b.full, b.empty,
                                 reinterpret_cast<float*>(b.partials), reinterpret_cast<unsigned*>(b.counts),
                                 static_cast<int>(b.gemv_split), static_cast<int>(b.gemv_slices),
                                 static_cast<int>(b.gemv_rows), static_cast<int>(b.gemv_stages)};
  __syncthreads();
  int preloaded = 0;  // Wo does not depend on the attention: its first chunks into the ring, the rest asked of L2
  if (ctx.thread == 0) {
    preloaded = llama_gemv::preload(bufs, b.wo, b.D, kGroups);
    llama_gemv::prefetch(bufs, b.wo, b.D, kGroups, preloaded);
    pl_grid_barrier(b.arrived);  // every attention output is stored
  }
  __syncthreads();
  const __nv_bfloat16* o = reinterpret_cast<const __nv_bfloat16*>(b.o);
  const __nv_bfloat16* x = reinterpret_cast<const __nv_bfloat16*>(b.residual);
  // cols: the group's output columns for every row, fp32 (lo .. lo + width - 1 and 32 + lo ..: a unit of the fact
  // gemv_rows); the residual add and the store.
  llama_gemv::run(ctx.thread, bufs, o, b.wo, b.B, b.D, kGroups, preloaded, [&](int group, int lo, int width,
                                                                               const float* cols) {
    for (int i = ctx.thread; i < b.B * 2 * width; i += blockDim.x) {
      const int r = i / (2 * width), c = llama_gemv::band_col(lo, width, i % (2 * width));
      const size_t at = static_cast<size_t>(r) * b.D + group * 64 + c;
      b.y[at] = __float2bfloat16(__bfloat162float(x[at]) + cols[llama_gemv::out_at(r, c)]);
    }
  });
}

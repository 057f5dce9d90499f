// llama_oproj_residual: the decode block's last whole-block phase, after the attention.
//
//   y = x + o Wo^T     o [B, 2048] (the attention's output), Wo [2048, 2048], x the residual
//
// A grid barrier first (every attention output is stored); before it, this block's first chunks of Wo are
// copied into the projection's ring, the rest asked of L2, and the residual of its first unit loaded. Then
// llama_gemv.cuh's projection: the 32 groups of 64 output columns, or parts of them (the fact gemv_rows),
// spread over the blocks (the fact gemv_split: whole groups, 2 or 4 blocks a group, or stream-K), each unit
// complete in the epilogue.

#include <cuda_bf16.h>

#include "llama_gemv.cuh"

namespace {
constexpr int kGroups = 32;  // 64-column groups of the output
}  // namespace

extern "C" __device__ void llama_oproj_residual(pl_ctx ctx, pl_bind_llama_oproj_residual b) {
  const llama_gemv::Buffers bufs{ctx.smem, b.ring, b.cols, b.full, b.empty,
                                 reinterpret_cast<float*>(b.partials), reinterpret_cast<unsigned*>(b.counts),
                                 static_cast<int>(b.gemv_split), static_cast<int>(b.gemv_slices),
                                 static_cast<int>(b.gemv_rows), static_cast<int>(b.gemv_stages),
                                 static_cast<int>(b.gemv_act_smem), b.act, /*act_written=*/true,
                                 static_cast<int>(b.gemv_core), static_cast<int>(b.cluster_ctas), b.half};
  const __nv_bfloat16* o = reinterpret_cast<const __nv_bfloat16*>(b.o);
  const __nv_bfloat16* x = reinterpret_cast<const __nv_bfloat16*>(b.residual);
  // Element i of a unit's epilogue (its rows < B, both bands): where it lies in x and y, its row and column of `cols`;
  // and its store, y = residual + the projection.
  struct Element {
    size_t at;
    int r, c;
  };
  const auto element = [&](int group, int lo, int width, int i) {
    const int r = i / (2 * width), c = llama_gemv::band_col(lo, width, i % (2 * width));
    return Element{static_cast<size_t>(r) * b.D + group * 64 + c, r, c};
  };
  const auto store = [&](const float* cols, Element e, __nv_bfloat16 residual) {
    b.y[e.at] = __float2bfloat16(__bfloat162float(residual) + cols[llama_gemv::out_at(e.r, e.c)]);
  };
  // The residual of this block's first unit, loaded before the grid barrier (x is the block's input, not written in
  // this launch): read in the epilogue, it was one more round trip between the last mma and the stores. Up to
  // kHeld elements a thread (every unit of 16-row parts at B <= 64; of 32-row parts at B <= 32); else read there.
  constexpr int kHeld = 4;
  const llama_gemv::Units units = llama_gemv::block_units(bufs, b.D, kGroups);
  const int width = static_cast<int>(b.gemv_rows) / 2;
  // (block_threads, a fact, not blockDim.x: the test folds at link time, and where it fails the held path is dropped)
  const int held_unit = units.first < units.end && b.B * 2 * width <= kHeld * static_cast<int>(b.block_threads)
                            ? units.first / units.per_group : -1;
  const int held_group = held_unit / units.parts, held_lo = held_unit % units.parts * width;
  __nv_bfloat16 held[kHeld];
  if (held_unit >= 0) {
#pragma unroll
    for (int k = 0; k < kHeld; ++k) {
      const int i = ctx.thread + k * static_cast<int>(b.block_threads);
      if (i < b.B * 2 * width) held[k] = x[element(held_group, held_lo, width, i).at];
    }
  }
  __syncthreads();
  int preloaded = 0;  // Wo does not depend on the attention: its first chunks into the ring, the rest asked of L2
  if (ctx.thread == 0) {
    preloaded = llama_gemv::preload(bufs, b.wo, b.D, kGroups);
    llama_gemv::prefetch(bufs, b.wo, b.D, kGroups, preloaded);
    pl_grid_barrier(b.arrived);  // every attention output is stored
  }
  __syncthreads();
  // cols: the group's output columns for every row, fp32 (lo .. lo + width - 1 and 32 + lo ..: a unit of the fact
  // gemv_rows); the residual add and the store.
  llama_gemv::run(ctx.thread, bufs, o, b.wo, b.B, b.D, kGroups, preloaded, [&](int group, int lo, int width,
                                                                               const float* cols) {
    if (held_unit >= 0 && group == held_group && lo == held_lo) {
#pragma unroll
      for (int k = 0; k < kHeld; ++k) {
        const int i = ctx.thread + k * static_cast<int>(b.block_threads);
        if (i < b.B * 2 * width) store(cols, element(group, lo, width, i), held[k]);
      }
      return;
    }
    for (int i = ctx.thread; i < b.B * 2 * width; i += blockDim.x) {
      const Element e = element(group, lo, width, i);
      store(cols, e, x[e.at]);
    }
  });
}

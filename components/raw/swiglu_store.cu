// swiglu_store: an epilogue written without CUTLASS. It takes a 128 x tile_n fp32 accumulator in
// registers (the wgmma C fragment of gemm_mainloop's `acc` port), applies SiLU(gate) * up, converts
// to bf16, stages the tile in shared memory and writes it out with 16-byte stores.
//
// Gate and up are interleaved in the weight every 8 rows (rows 16 q .. 16 q + 7 of B are gate
// rows 8 q .. 8 q + 7, the next 8 are the matching up rows), so in the wgmma fragment a thread's
// column block j = 2 p holds gate and j = 2 p + 1 the up values of the same 8 output columns: the
// product never leaves the thread. With gated = 0 the tile is stored as is (identity epilogue).
//
// Staging is XOR-swizzled in 16-byte chunks (chunk ^ row % 8): the 8 rows a warp writes at once
// land in 8 different chunks, so neither the fragment writes nor the row-wise reads conflict.

#include <cuda_bf16.h>

namespace {
constexpr int kThreads = pl_facts::store_threads;
constexpr int kTileM = 128;
constexpr int kTileN = pl_facts::tile_n;
constexpr bool kGated = pl_facts::gated != 0;
constexpr int kOutCols = kGated ? kTileN / 2 : kTileN;  // output columns per tile
constexpr int kRowBytes = kOutCols * 2;
constexpr int kChunks = kRowBytes / 16;                  // 16-byte chunks per staged row
constexpr int kValues = kTileM * kTileN / kThreads;
static_assert(kThreads == 256, "the wgmma fragment of two warpgroups");

__device__ __forceinline__ float silu(float g) { return __fdividef(g, 1.f + __expf(-g)); }
}  // namespace

extern "C" __device__ void swiglu_store_tile(pl_ctx ctx, pl_bind_swiglu_store b, float (&acc)[kValues]) {
  const int t = ctx.thread;
  const int lane = t % 32;
  const int row0 = 64 * (t / 128) + 16 * ((t % 128) / 32) + lane / 4;
  unsigned char* staging = ctx.smem + b.staging;

  pl_bar_sync(b.staged, kThreads);  // everyone has copied the previous tile out of staging
#pragma unroll
  for (int j = 0; j < kTileN / 8; j += kGated ? 2 : 1) {
    const int chunk = kGated ? j / 2 : j;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 8 * h;
      float lo = acc[4 * j + 2 * h], hi = acc[4 * j + 2 * h + 1];
      if (kGated) {
        lo = silu(lo) * acc[4 * (j + 1) + 2 * h];
        hi = silu(hi) * acc[4 * (j + 1) + 2 * h + 1];
      }
      const __nv_bfloat162 packed = __floats2bfloat162_rn(lo, hi);
      *reinterpret_cast<__nv_bfloat162*>(staging + row * kRowBytes + ((chunk ^ (row % 8)) * 16) + (lane % 4) * 4) =
          packed;
    }
  }
  pl_bar_sync(b.staged, kThreads);  // the whole tile is staged

  const int out_cols = b.out_cols;
  __nv_bfloat16* out = b.y + static_cast<long long>(ctx.tile_row) * kTileM * out_cols + ctx.tile_col * kOutCols;
#pragma unroll
  for (int i = t; i < kTileM * kChunks; i += kThreads) {
    const int row = i / kChunks;
    const int c = i % kChunks;
    const int4 v = *reinterpret_cast<const int4*>(staging + row * kRowBytes + ((c ^ (row % 8)) * 16));
    // Streaming store: the output is not read again here, so keep L2 for the operands.
    __stcs(reinterpret_cast<int4*>(out + static_cast<long long>(row) * out_cols + c * 8), v);
  }
}

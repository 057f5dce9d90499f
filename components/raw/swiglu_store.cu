// swiglu_store: an epilogue written without CUTLASS. It takes a 128 x tile_n fp32 accumulator in
// registers (the wgmma C fragment of gemm_mainloop's `acc` port), applies SiLU(gate) * up, converts
// to bf16, stages the tile in shared memory and stores it with the TMA engine.
//
// Gate and up are interleaved in the weight every 8 rows (rows 16 q .. 16 q + 7 of B are gate
// rows 8 q .. 8 q + 7, the next 8 are the matching up rows), so in the wgmma fragment a thread's
// column block j = 2 p holds gate and j = 2 p + 1 the up values of the same 8 output columns: the
// product never leaves the thread. With gated = 0 the tile is stored as is (identity epilogue).
//
// Staging holds up to 128 output columns as boxes of 128 rows x 64 columns (128-byte rows), laid out
// the way TMA's 128B swizzle reads them: the 16-byte chunk c of row r sits at chunk c ^ (r % 8). The
// 8 rows a warp writes at once then fall in 8 different chunks, free of bank conflicts. A wider
// output tile (the identity at tile_n = 256) is staged and stored in parts of 128 columns: 32 KB of
// staging instead of 64 leaves the mainloop room for a fourth ring stage. One thread issues the TMA
// stores and waits only until they have read staging; the global writes complete in the background
// while the warpgroups stage the next part or run the next tile's mainloop.

#include <cuda_bf16.h>

namespace {
constexpr int kThreads = pl_facts::store_threads;
constexpr int kTileM = 128;
constexpr int kTileN = pl_facts::tile_n;
constexpr bool kGated = pl_facts::gated != 0;
constexpr int kOutCols = kGated ? kTileN / 2 : kTileN;  // output columns per tile
constexpr int kBoxCols = 64;                             // 128 bytes of bf16: the swizzle span
constexpr int kPartCols = kOutCols < 128 ? kOutCols : 128;  // output columns staged at a time
constexpr int kParts = kOutCols / kPartCols;
constexpr int kPartBoxes = kPartCols / kBoxCols;
constexpr int kBoxBytes = kTileM * kBoxCols * 2;
constexpr int kValues = kTileM * kTileN / kThreads;
static_assert(kThreads == 256, "the wgmma fragment of two warpgroups");

// SiLU(g) = g * sigmoid(g) = h + h * tanh(h) with h = g / 2: one MUFU op (tanh.approx, relative
// error ~2^-11, below bf16's 2^-9 rounding) instead of ex2 + rcp.
__device__ __forceinline__ float silu(float g) {
  const float h = 0.5f * g;
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(h));
  return fmaf(h, t, h);
}
}  // namespace

extern "C" __device__ void swiglu_store_tile(pl_ctx ctx, pl_bind_swiglu_store b, float (&acc)[kValues]) {
  const int t = ctx.thread;
  const int lane = t % 32;
  const int row0 = 64 * (t / 128) + 16 * ((t % 128) / 32) + lane / 4;
  unsigned char* staging = ctx.smem + b.staging;

#pragma unroll
  for (int part = 0; part < kParts; ++part) {
    pl_bar_sync(b.staged, kThreads);  // the previous stores have read staging
#pragma unroll
    for (int chunk = 0; chunk < kPartCols / 8; ++chunk) {  // 16-byte chunk (8 output columns) within the part's rows
      const int col8 = part * (kPartCols / 8) + chunk;     // 8-column block of the output tile
      const int j = kGated ? 2 * col8 : col8;              // its accumulator block (gate; up is j + 1)
      const int box = chunk / 8;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + 8 * h;
        float lo = acc[4 * j + 2 * h], hi = acc[4 * j + 2 * h + 1];
        if (kGated) {
          lo = silu(lo) * acc[4 * (j + 1) + 2 * h];
          hi = silu(hi) * acc[4 * (j + 1) + 2 * h + 1];
        }
        const __nv_bfloat162 packed = __floats2bfloat162_rn(lo, hi);
        *reinterpret_cast<__nv_bfloat162*>(staging + box * kBoxBytes + row * 128 + (((chunk % 8) ^ (row % 8)) * 16) +
                                           (lane % 4) * 4) = packed;
      }
    }
    pl_fence_proxy_async();           // these generic-proxy writes are read by the TMA (async proxy)
    pl_bar_sync(b.staged, kThreads);  // the whole part is staged
    if (t == 0) {
      const uint32_t src = pl_smem_addr(staging);
#pragma unroll
      for (int box = 0; box < kPartBoxes; ++box)
        pl_tma_store_2d(b.y, src + box * kBoxBytes, ctx.tile_col * kOutCols + part * kPartCols + box * kBoxCols,
                        ctx.tile_row * kTileM);
      pl_bulk_commit();
      pl_bulk_wait_read();  // staging may be rewritten (and the block may exit) once it has been read
    }
  }
}

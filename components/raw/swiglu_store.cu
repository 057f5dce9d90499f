// swiglu_store: an epilogue written without CUTLASS. It takes a tile_m x tile_n fp32 accumulator in
// registers (the wgmma C fragment of gemm_mainloop's `acc` port), applies SiLU(gate) * up, converts
// to bf16, stages the tile in shared memory and stores it with the TMA engine. In a 128-row tile each
// warpgroup holds 64 rows; in a 64-row tile each holds half of the columns, and writes only its half.
//
// Gate and up alternate along the accumulator's columns every G = gate_group (rows 2 G q .. 2 G q + G - 1 of B are
// gate rows G q .., the next G are the matching up rows: a weight interleaved every 8 rows, or gathered so by the
// mainloop from two halves), and in the wgmma fragment a thread holds 8-column blocks across all of its warpgroup's
// columns: block j holds gate and block j + G / 8 the up values of the same 8 output columns. The product never
// leaves the thread. With gated = 0 the tile is stored as is (identity epilogue).
//
// Staging holds one part of the output tile, at most 128 columns (a wider tile is stored in equal parts: 256 as 2 x
// 128, 208 as 2 x 104, 144 as 2 x 72, 200 as 5 x 40), as TMA boxes of tile_m rows. Where 64 columns divide the part,
// the boxes are 64 wide (128-byte rows), laid out the way TMA's 128B swizzle reads them: the 16-byte chunk c of row r
// sits at chunk c ^ (r % 8), so the 8 rows a warp writes at once fall in 8 different chunks, free of bank conflicts.
// The widths that fill the SMs' last wave (parts of 72, 104 and 40 columns) are stored as one box the width of the
// part, unswizzled: its rows are 144, 208 or 80 bytes, 36, 52 or 20 banks apart, which is 4 or 20 modulo 32, so a
// warp's 8 rows of one 16-byte chunk fall in 8 different 4-bank groups, also free of conflicts (any width of 8 x an odd
// number). Staging in parts keeps it at 32 KB or less, which leaves the mainloop room for its ring stages. One thread
// issues the TMA stores and waits only until they have read staging; the global writes complete in the background while
// the warpgroups stage the next part or run the next tile's mainloop. A tile past the output's last column (the partial
// last tile of 144, 200 or 208) is clipped by TMA: its columns there are not written.

#include <cuda_bf16.h>

namespace {
constexpr int kThreads = pl_facts::store_threads;
constexpr int kTileM = pl_facts::tile_m;
constexpr int kTileN = pl_facts::tile_n;
constexpr bool kGated = pl_facts::gated != 0;
constexpr int kGroup8 = pl_facts::gate_group / 8;  // gate (and up) 8-column blocks in a row of the interleave
constexpr bool kHalves = kTileM == 64;                     // the warpgroups hold the two halves of the columns
static_assert(kTileM == 128 || kTileM == 64, "tile_m is 64 or 128");
constexpr int kOwnBlocks = kTileN / 8 / (kHalves ? 2 : 1); // 8-column accumulator blocks a thread holds
static_assert(!kGated || kOwnBlocks % (2 * kGroup8) == 0, "gate and up groups in pairs inside each warpgroup's columns");
constexpr int kOwnOut8 = kGated ? kOwnBlocks / 2 : kOwnBlocks;  // 8-column output blocks a thread writes
constexpr int kOutCols = kGated ? kTileN / 2 : kTileN;  // output columns per tile
// Staged and stored one part at a time, the contract's store_parts: as few as hold at most 128 columns each, or 5
// where halves would not be whole 16-byte chunks (200 columns: 5 x 40, not 2 x 100)
constexpr int kFewestParts = (kOutCols + 127) / 128;
constexpr int kParts = kFewestParts + ((kOutCols / kFewestParts) % 8 != 0 ? 3 : 0);
constexpr int kPartCols = kOutCols / kParts;               // the contract's store_part
constexpr bool kSwizzled = kPartCols % 64 == 0;
constexpr int kBoxCols = kSwizzled ? 64 : kPartCols;       // the contract's store_box: the swizzle span, or the part
static_assert(kSwizzled || (kPartCols / 8) % 2 == 1, "an unswizzled box's rows are an odd number of 16-byte chunks");
constexpr int kBoxChunks = kBoxCols / 8;                   // 16-byte chunks in a box row
constexpr int kPartChunks = kPartCols / 8;                 // 16-byte chunks in a part's row
constexpr int kPartBoxes = kPartCols / kBoxCols;
constexpr int kBoxBytes = kTileM * kBoxCols * 2;
static_assert(kParts * kPartCols == kOutCols && kPartCols % 8 == 0, "equal parts of whole 16-byte chunks");
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
  const int row0 = (kHalves ? 0 : 64 * (t / 128)) + 16 * ((t % 128) / 32) + lane / 4;
  const int first8 = kHalves ? (t / 128) * kOwnOut8 : 0;  // the thread's first 8-column block of the output tile
  unsigned char* staging = ctx.smem + b.staging;

#pragma unroll
  for (int part = 0; part < kParts; ++part) {
    pl_bar_sync(b.staged, kThreads);  // the previous stores have read staging
#pragma unroll
    for (int own = 0; own < kOwnOut8; ++own) {  // the thread's 8-column blocks of the output: those in this part
      const int col8 = first8 + own;            // 8-column block of the output tile
      if (col8 / kPartChunks != part) continue;
      const int chunk = col8 % kPartChunks;     // 16-byte chunk within the part's rows
      // its accumulator block (gate; up is gate_group columns on, j + kGroup8): a register index
      const int j = kGated ? (own / kGroup8) * 2 * kGroup8 + own % kGroup8 : own;
      const int box = chunk / kBoxChunks;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + 8 * h;
        float lo = acc[4 * j + 2 * h], hi = acc[4 * j + 2 * h + 1];
        if (kGated) {
          lo = silu(lo) * acc[4 * (j + kGroup8) + 2 * h];
          hi = silu(hi) * acc[4 * (j + kGroup8) + 2 * h + 1];
        }
        const __nv_bfloat162 packed = __floats2bfloat162_rn(lo, hi);
        const int at = (chunk % kBoxChunks) ^ (kSwizzled ? row % 8 : 0);  // the chunk's place in its box row
        *reinterpret_cast<__nv_bfloat162*>(staging + box * kBoxBytes + row * kBoxCols * 2 + at * 16 + (lane % 4) * 4) =
            packed;
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

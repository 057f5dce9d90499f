// moe_epilogue: the grouped GEMM's epilogue. It takes the 128 x 256 fp32 accumulator of
// moe_mainloop's `acc` port (the wgmma C fragment) and
//   - for a gate/up tile: SiLU(gate) * up -> 128 bf16 columns of the hidden rows (gate and up alternate every
//     gate_group columns, so both halves of an output sit in one thread, as in swiglu_store);
//   - for a down tile: the 256 columns as bf16 -> the expert-output rows;
//   - with save_pre, a gate/up tile's 256 columns as bf16 as well -> the pre-activation rows (a training
//     forward's, for the SwiGLU backward).
// The tile is staged in shared memory (128 x 64 boxes, 128B-swizzled: conflict-free writes), then
// all 256 threads store it with 16-byte coalesced stores. After a gate/up tile, thread 0 counts it
// in the m-tile's `done` counter with release semantics, once every thread's stores are issued
// (the barrier orders them before the fence): the down tile's producer acquires that counter.

#include <cuda_bf16.h>

namespace {
constexpr int kThreads = pl_facts::store_threads;
constexpr int kTileM = 128;
constexpr int kTileN = pl_facts::tile_n;
constexpr int kBoxBytes = kTileM * 64 * 2;
constexpr int kValues = kTileM * kTileN / kThreads;
constexpr int kGroup8 = pl_facts::gate_group / 8;  // 8-column blocks of gate (then of up) in a row of the interleave
static_assert(kTileN / 8 % (2 * kGroup8) == 0, "a tile holds whole gate/up group pairs");
static_assert(kThreads == 256, "the wgmma fragment of two warpgroups");

__device__ __forceinline__ float silu(float g) {
  const float h = 0.5f * g;
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(h));
  return fmaf(h, t, h);
}

// 16-byte chunk `chunk` (8 columns) of tile row `row` in the swizzled staging.
__device__ __forceinline__ unsigned staged_at(int row, int chunk) {
  return (chunk / 8) * kBoxBytes + row * 128 + (((chunk % 8) ^ (row % 8)) * 16);
}

template <bool kGated>
__device__ __forceinline__ void stage(unsigned char* staging, int t, const float (&acc)[kValues]) {
  const int lane = t % 32;
  const int row0 = 64 * (t / 128) + 16 * ((t % 128) / 32) + lane / 4;
#pragma unroll
  for (int chunk = 0; chunk < (kGated ? kTileN / 16 : kTileN / 8); ++chunk) {  // 8-column output blocks
    // its accumulator block: gate (its up block is gate_group columns on, j + kGroup8), or the block itself
    const int j = kGated ? (chunk / kGroup8) * 2 * kGroup8 + chunk % kGroup8 : chunk;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 8 * h;
      float lo = acc[4 * j + 2 * h], hi = acc[4 * j + 2 * h + 1];
      if (kGated) {
        lo = silu(lo) * acc[4 * (j + kGroup8) + 2 * h];
        hi = silu(hi) * acc[4 * (j + kGroup8) + 2 * h + 1];
      }
      *reinterpret_cast<__nv_bfloat162*>(staging + staged_at(row, chunk) + (lane % 4) * 4) = __floats2bfloat162_rn(lo, hi);
    }
  }
}

// The staged tile (cols columns) to rows row0.. of a row-major bf16 matrix with `ld` columns, at column col0.
__device__ __forceinline__ void store(const unsigned char* staging, int t, int cols, unsigned char* dst, int ld,
                                      int row0, int col0) {
  const int chunks = cols / 8;
  for (int i = t; i < kTileM * chunks; i += kThreads) {
    const int row = i / chunks, chunk = i % chunks;
    const int4 v = *reinterpret_cast<const int4*>(staging + staged_at(row, chunk));
    *reinterpret_cast<int4*>(dst + (static_cast<size_t>(row0 + row) * ld + col0 + chunk * 8) * 2) = v;
  }
}
}  // namespace

extern "C" __device__ void moe_epilogue_tile(pl_ctx ctx, pl_bind_moe_epilogue b, float (&acc)[kValues]) {
  // {expert, row0, n0, kind}: the table's layout is the permute's (its guarantees table_header, tile_words).
  const int4 tile = *reinterpret_cast<const int4*>(b.table + 4 * (b.table_header + ctx.tile * b.tile_words));
  const bool down = tile.w != 0;
  unsigned char* staging = ctx.smem + b.staging;
  pl_bar_sync(b.staged, kThreads);  // the previous tile's stores have read staging
  if (down) {
    stage<false>(staging, ctx.thread, acc);
  } else {
    stage<true>(staging, ctx.thread, acc);
  }
  pl_bar_sync(b.staged, kThreads);  // the whole tile is staged
  if (down) {
    store(staging, ctx.thread, kTileN, b.out_rows, b.H, tile.y, tile.z);
  } else {
    store(staging, ctx.thread, kTileN / 2, b.hidden, b.I, tile.y, tile.z / 2);
    if (pl_facts::save_pre) {  // the pre-activations too, as accumulated (a training forward keeps them)
      pl_bar_sync(b.staged, kThreads);  // the SwiGLU rows are read out of staging
      stage<false>(staging, ctx.thread, acc);
      pl_bar_sync(b.staged, kThreads);
      store(staging, ctx.thread, kTileN, b.pre, 2 * b.I, tile.y, tile.z);
    }
    pl_bar_sync(b.staged, kThreads);  // every thread's stores are issued
    if (ctx.thread == 0) {
      __threadfence();  // release: the tile's stores before the count
      atomicAdd(reinterpret_cast<int*>(b.done + 4 * (tile.y / kTileM)), 1);
    }
  }
}

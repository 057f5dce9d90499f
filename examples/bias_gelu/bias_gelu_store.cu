// bias_gelu_store: an epilogue for the bundled CuTe mainloop (components/cutlass/gemm_mainloop),
// written from the guide ("Write an epilogue for the bundled mainloop"). It takes the 128 x tile_n
// fp32 accumulator the mainloop hands over in registers (its `acc` port: the wgmma C fragment),
// adds a bf16 bias per output column, applies GELU (tanh form, as cuBLASLt's GELU epilogue),
// converts to bf16, stages the tile in shared memory in TMA's 128B-swizzled layout and stores it
// with the TMA engine.
//
// Fragment (the contract's `fragment`, CuTe's partition of the C tile over 256 threads): value
// v = i + 2 h + 4 j of thread t holds row 64 (t / 128) + 16 ((t % 128) / 32) + 8 h + (t % 32) / 4
// and column 8 j + 2 (t % 4) + i. So each thread's two columns of block j are adjacent: one
// 4-byte bias load and one bf16x2 store per (j, h).

#include <cuda_bf16.h>

namespace {
constexpr int kThreads = pl_facts::store_threads;
constexpr int kTileM = 128;
constexpr int kTileN = pl_facts::tile_n;
constexpr int kSplit = pl_facts::store_split;  // the tile is staged and stored in this many column parts
constexpr int kPartCols = kTileN / kSplit;
constexpr int kBoxCols = 64;  // 128 bytes of bf16: the swizzle span
constexpr int kPartBoxes = kPartCols / kBoxCols;
constexpr int kBoxBytes = kTileM * kBoxCols * 2;
constexpr int kValues = kTileM * kTileN / kThreads;
static_assert(kThreads == 256, "the wgmma fragment of two warpgroups");
static_assert(kPartCols % kBoxCols == 0, "each part is whole 64-column boxes");

// GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), one MUFU tanh.approx
// (relative error ~2^-11, below bf16's 2^-9 rounding).
__device__ __forceinline__ float gelu(float x) {
  const float u = 0.7978845608f * fmaf(0.044715f * x, x * x, x);
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(u));
  const float h = 0.5f * x;
  return fmaf(h, t, h);
}
}  // namespace

// Staging holds one part (kPartCols columns) at a time: with store_split = 2 it is half the tile
// (32 KB at tile_n = 256), which leaves the mainloop room for a fourth ring stage. Each part:
// wait until the previous stores have read staging, write the fragment values, make them visible
// to the TMA (fence, barrier), one thread issues the stores.
extern "C" __device__ void bias_gelu_store_tile(pl_ctx ctx, pl_bind_bias_gelu_store b, float (&acc)[kValues]) {
  const int t = ctx.thread;
  const int lane = t % 32;
  const int row0 = 64 * (t / 128) + 16 * ((t % 128) / 32) + lane / 4;
  unsigned char* staging = ctx.smem + b.staging;
  const __nv_bfloat16* bias = b.bias + ctx.tile_col * kTileN + 2 * (lane % 4);

#pragma unroll
  for (int part = 0; part < kSplit; ++part) {
    pl_bar_sync(b.staged, kThreads);  // the previous stores have read staging
#pragma unroll
    for (int jj = 0; jj < kPartCols / 8; ++jj) {
      const int j = part * (kPartCols / 8) + jj;  // 8-column block of the tile (static: acc stays in registers)
      const float2 bj = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(bias + 8 * j));
      const int box = jj / 8;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + 8 * h;
        const float lo = gelu(acc[4 * j + 2 * h] + bj.x), hi = gelu(acc[4 * j + 2 * h + 1] + bj.y);
        *reinterpret_cast<__nv_bfloat162*>(staging + box * kBoxBytes + row * 128 + (((jj % 8) ^ (row % 8)) * 16) +
                                           (lane % 4) * 4) = __floats2bfloat162_rn(lo, hi);
      }
    }
    pl_fence_proxy_async();           // these generic-proxy writes are read by the TMA (async proxy)
    pl_bar_sync(b.staged, kThreads);  // the whole part is staged
    if (t == 0) {
      const uint32_t src = pl_smem_addr(staging);
#pragma unroll
      for (int box = 0; box < kPartBoxes; ++box)
        pl_tma_store_2d(b.y, src + box * kBoxBytes, ctx.tile_col * kTileN + part * kPartCols + box * kBoxCols,
                        ctx.tile_row * kTileM);
      pl_bulk_commit();
      pl_bulk_wait_read();  // staging may be rewritten (and the block may exit) once it has been read
    }
  }
}

// tile_store: an epilogue written the way CUTLASS epilogues are: it takes a staged fp32 tile
// from shared memory, converts it to bf16 and writes it out with 16-byte stores, then syncs its
// threads on its own named barrier before the staging buffer may be reused. Like CUTLASS, it
// keeps named barriers 1..7 for itself and uses ID 1 hard-coded (pinned in the contract).

#include <cuda_bf16.h>

namespace {
constexpr int kThreads = pl_facts::store_threads;
constexpr int kPitch = 8;  // bf16 values per 16-byte store
}

extern "C" __device__ void tile_store_tile(pl_ctx ctx, pl_bind_tile_store b) {
  const float* staging = reinterpret_cast<const float*>(ctx.smem + b.staging);
  const int chunks_per_row = b.tile_cols / kPitch;
  const int chunks = b.tile_rows * chunks_per_row;
  __nv_bfloat16* out = b.y + static_cast<long long>(ctx.tile_row) * b.tile_rows * b.tile_cols;
  for (int i = ctx.thread; i < chunks; i += kThreads) {
    const int row = i / chunks_per_row;
    const int c = (i % chunks_per_row) * kPitch;
    const float4 lo = *reinterpret_cast<const float4*>(staging + row * b.tile_cols + c);
    const float4 hi = *reinterpret_cast<const float4*>(staging + row * b.tile_cols + c + 4);
    __nv_bfloat162 packed[4] = {__floats2bfloat162_rn(lo.x, lo.y), __floats2bfloat162_rn(lo.z, lo.w),
                                __floats2bfloat162_rn(hi.x, hi.y), __floats2bfloat162_rn(hi.z, hi.w)};
    *reinterpret_cast<uint4*>(out + static_cast<long long>(row) * b.tile_cols + c) =
        *reinterpret_cast<const uint4*>(packed);
  }
  pl_bar_sync(b.done, kThreads);  // staging may be overwritten once every thread has read it
}

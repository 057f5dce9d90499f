// tmem_bias_gelu: an sm_100a epilogue that reads a 128 x tile_n fp32 accumulator from tensor memory (the `acc` TMEM
// port of umma_mainloop), adds a bf16 bias per output column, applies GELU (tanh form, as cuBLASLt's GELU epilogue)
// and stores bf16 rows to y [M, N] with 16-byte stores.
//
// One warpgroup: a warp may touch only its quarter of the 128 TMEM lanes (lanes 32 (w % 4) .. + 31 for warp w of the
// block), and the role is warpgroup-aligned, so thread t = ctx.thread is TMEM lane t = tile row t. Each thread reads
// its row 32 columns at a time (tcgen05.ld 32x32b.x32: one 32-bit column per register, the warp's 32 lanes at once),
// so a row's bias-add, GELU and bf16 packing never leave the thread. The slot is handed over on mbarriers:
// acc_full[slot] (the mainloop's tcgen05.commit) and acc_empty[slot] (one arrival per warp here, 4 in all), slot =
// ctx.iter % 2 at b.acc + slot * tile_n. The slot is released as soon as its last columns are in registers, so the
// mainloop's next-but-one tile can start while this one is still being stored.
//
// Stores go straight from registers: per chunk a thread writes 64 contiguous bytes of its row (four 16-byte stores),
// the warp 32 consecutive rows. No smem staging or TMA store: simpler, and each thread's four stores fill two whole
// 32-byte sectors, which L2 merges; a staged TMA store (swiglu_store's scheme) is the alternative if these stores
// show up in a profile.

#include <cuda_bf16.h>

namespace {
constexpr int kTileM = 128;
constexpr int kTileN = pl_facts::tile_n;
constexpr int kChunk = 32;  // columns per tcgen05.ld (.x32: 32 registers a thread)
static_assert(kTileN % kChunk == 0, "whole 32-column chunks");
static_assert(pl_facts::epilogue_threads == kTileM, "one warpgroup: a thread per TMEM lane, a lane per tile row");

// GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), one MUFU tanh.approx (relative error ~2^-11,
// below bf16's 2^-9 rounding).
__device__ __forceinline__ float gelu(float x) {
  const float u = 0.7978845608f * fmaf(0.044715f * x, x * x, x);
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(u));
  const float h = 0.5f * x;
  return fmaf(h, t, h);
}

// 32 consecutive columns from `taddr` on, of the warp's 32 lanes (lane field = the warp's first lane): thread l gets
// lane base + l. The wait is in the same asm statement, so the compiler cannot use the registers before they arrive.
__device__ __forceinline__ void tmem_load_32cols(uint32_t taddr, uint32_t (&r)[kChunk]) {
  asm volatile(
      "tcgen05.ld.sync.aligned.32x32b.x32.b32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, [%32];\n"
      "tcgen05.wait::ld.sync.aligned;"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]), "=r"(r[7]), "=r"(r[8]),
        "=r"(r[9]), "=r"(r[10]), "=r"(r[11]), "=r"(r[12]), "=r"(r[13]), "=r"(r[14]), "=r"(r[15]), "=r"(r[16]),
        "=r"(r[17]), "=r"(r[18]), "=r"(r[19]), "=r"(r[20]), "=r"(r[21]), "=r"(r[22]), "=r"(r[23]), "=r"(r[24]),
        "=r"(r[25]), "=r"(r[26]), "=r"(r[27]), "=r"(r[28]), "=r"(r[29]), "=r"(r[30]), "=r"(r[31])
      : "r"(taddr)
      : "memory");
}

__device__ __forceinline__ uint32_t gelu_pack(uint32_t lo, uint32_t hi, __nv_bfloat162 bias) {
  const float2 bf = __bfloat1622float2(bias);
  const __nv_bfloat162 v = __floats2bfloat162_rn(gelu(__uint_as_float(lo) + bf.x), gelu(__uint_as_float(hi) + bf.y));
  return *reinterpret_cast<const uint32_t*>(&v);
}
}  // namespace

extern "C" __device__ void tmem_bias_gelu_tile(pl_ctx ctx, pl_bind_tmem_bias_gelu b) {
  const int slot = ctx.iter & 1;
  const int quarter = ctx.thread / 32;  // = the warp's rank in its warpgroup: the TMEM lanes it may access
  const int row = ctx.tile_row * kTileM + ctx.thread;
  const int col0 = ctx.tile_col * kTileN;
  // Use u = iter / 2 of the slot: the mainloop's commit completes phase u of acc_full[slot].
  pl_mbar_wait(pl_mbar(ctx, b.acc_full, slot), (ctx.iter >> 1) & 1);
  asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");  // our tcgen05.ld after the MMAs' writes
  const uint32_t taddr = b.acc + slot * kTileN + (static_cast<uint32_t>(32 * quarter) << 16);
  __nv_bfloat16* out = b.y + static_cast<size_t>(row) * b.N + col0;

#pragma unroll
  for (int c = 0; c < kTileN / kChunk; ++c) {
    uint32_t r[kChunk];
    tmem_load_32cols(taddr + c * kChunk, r);  // every lane, also of rows past M: tcgen05.ld is warp-wide (.aligned)
    if (c == kTileN / kChunk - 1) {
      // The slot's last columns are in registers: hand it back to the MMA warp. The fence orders our tcgen05.ld
      // before the arrival (and the MMAs that follow it); one lane arrives for the warp once all lanes have loaded.
      asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
      __syncwarp();
      if ((ctx.thread & 31) == 0) pl_mbar_arrive(pl_mbar(ctx, b.acc_empty, slot));
    }
#pragma unroll
    for (int q = 0; q < kChunk / 8; ++q) {  // 8 columns: one 16-byte bias load (the same for the warp), one store
      const int col = c * kChunk + q * 8;
      if (col0 + col >= b.N) break;  // the partial last tile column (N is a multiple of 8)
      const uint4 bias = *reinterpret_cast<const uint4*>(b.bias + col0 + col);
      const __nv_bfloat162* bias2 = reinterpret_cast<const __nv_bfloat162*>(&bias);
      uint4 v;
      v.x = gelu_pack(r[q * 8 + 0], r[q * 8 + 1], bias2[0]);
      v.y = gelu_pack(r[q * 8 + 2], r[q * 8 + 3], bias2[1]);
      v.z = gelu_pack(r[q * 8 + 4], r[q * 8 + 5], bias2[2]);
      v.w = gelu_pack(r[q * 8 + 6], r[q * 8 + 7], bias2[3]);
      if (row < b.M) *reinterpret_cast<uint4*>(out + col) = v;  // the partial last tile row
    }
  }
}

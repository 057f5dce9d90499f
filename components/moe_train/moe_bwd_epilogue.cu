// moe_bwd_epilogue: the backward MoE grouped GEMM's epilogue (docs/design/moe_training.md, "The backward link's
// components: the interface"). It takes the 128 x 256 fp32 accumulator of moe_bwd_mainloop's `acc` port (the
// wgmma C fragment, as the forward's moe_epilogue does) and, by the kind of the plan's table entry:
//   kind 0 (da tile): the SwiGLU backward. da at (row, i) pairs with gate = h[row, 16 (i / 8) + i % 8] and
//     up = h[row, that + 8]; s = sigmoid(gate), dgate = da up s (1 + gate (1 - s)), dup = da gate s, both stored as
//     bf16 at those two columns of dh. A quad of the fragment holds 8 consecutive columns of a row, so its four
//     4-byte loads read one 16-byte gate piece and its up piece (a 32-byte sector), and the stores write the same:
//     no staging. Then the m-tile's `done` counter is raised with release semantics (moe_bwd_mainloop's producer
//     acquires it before a kind 2 or 3 tile reads dh).
//   kind 1: dW2_e rows e H + m0 .., columns n0 .. (bf16, ld I);
//   kind 2: dxp rows row0 .., columns n0 .. (bf16, ld H);
//   kind 3: dW1_e rows e 2I + m0 .., columns n0 .. (bf16, ld H):
//     the tile staged in shared memory (128 x 64 boxes, 128B-swizzled: conflict-free writes), then stored by all
//     256 threads with 16-byte coalesced stores, as the forward's down tile is.

#include <cuda_bf16.h>

namespace {
constexpr int kThreads = pl_facts::store_threads;
constexpr int kTileM = 128;
constexpr int kTileN = pl_facts::tile_n;
constexpr int kBoxBytes = kTileM * 64 * 2;
constexpr int kValues = kTileM * kTileN / kThreads;
constexpr int kBlocks = kTileN / 8;  // 8-column blocks of the accumulator fragment (j of v = 4 j + 2 h + i)
constexpr int kBatch = 8;            // blocks of h whose loads are in flight together in the SwiGLU backward
static_assert(kThreads == 256, "the wgmma fragment of two warpgroups");
static_assert(kValues == 4 * kBlocks, "4 values per 8-column block and thread");
static_assert(kBlocks % kBatch == 0, "whole batches");

// The table entry's words: {kind, expert, row0, rows, m0, n0, pos0, 0}.
enum Kind { kDa = 0, kDw2 = 1, kDxp = 2, kDw1 = 3 };

// sigmoid(g) with exp (ex2.approx) and an approximate divide (div.approx: 1 / inf = 0, so a very negative g gives 0;
// no IEEE-division slow path, which would remain a call after LTO).
__device__ __forceinline__ float sigmoid(float g) { return __fdividef(1.0f, 1.0f + __expf(-g)); }

__device__ __forceinline__ float2 unpack(unsigned u) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u));
}

__device__ __forceinline__ unsigned pack(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&v);
}

// Kind 0: dh = SwiGLU^T(da = acc, h) for the tile's 128 rows from row0, da columns n0 .. n0 + 256 (h and dh columns
// 2 n0 .. 2 n0 + 512). Thread t holds, for block j and half hf, row r + 8 hf and columns 8 j + 2 (t % 4) + {0, 1}.
__device__ __forceinline__ void swiglu_backward(const __nv_bfloat16* __restrict__ h, unsigned char* __restrict__ dh,
                                                int two_i, int t, int row0, int n0, const float (&acc)[kValues]) {
  const int lane = t % 32;
  const int r = 64 * (t / 128) + 16 * ((t % 128) / 32) + lane / 4;
  const size_t first = static_cast<size_t>(row0 + r) * two_i + 2 * n0 + 2 * (lane % 4);  // gate of block 0, row r
  const unsigned* __restrict__ src = reinterpret_cast<const unsigned*>(h + first);
  unsigned* __restrict__ dst = reinterpret_cast<unsigned*>(dh) + first / 2;
  const size_t rows8 = static_cast<size_t>(8) * two_i / 2;  // 8 rows on, in 4-byte words
#pragma unroll
  for (int j0 = 0; j0 < kBlocks; j0 += kBatch) {
    unsigned gate[kBatch][2], up[kBatch][2];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const unsigned* at = src + hf * rows8 + 8 * (j0 + j);  // 16 columns (gate and up) per block
        gate[j][hf] = __ldg(at);
        up[j][hf] = __ldg(at + 4);  // 8 columns on
      }
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const float2 g = unpack(gate[j][hf]), u = unpack(up[j][hf]);
        const float d0 = acc[4 * (j0 + j) + 2 * hf], d1 = acc[4 * (j0 + j) + 2 * hf + 1];
        const float s0 = sigmoid(g.x), s1 = sigmoid(g.y);
        const float dgate0 = d0 * u.x * s0 * fmaf(g.x, 1.0f - s0, 1.0f);
        const float dgate1 = d1 * u.y * s1 * fmaf(g.y, 1.0f - s1, 1.0f);
        const float dup0 = d0 * g.x * s0, dup1 = d1 * g.y * s1;
        unsigned* at = dst + hf * rows8 + 8 * (j0 + j);
        at[0] = pack(dgate0, dgate1);
        at[4] = pack(dup0, dup1);
      }
    }
  }
}

// 16-byte chunk `chunk` (8 columns) of tile row `row` in the swizzled staging.
__device__ __forceinline__ unsigned staged_at(int row, int chunk) {
  return (chunk / 8) * kBoxBytes + row * 128 + (((chunk % 8) ^ (row % 8)) * 16);
}

// The accumulator as bf16 into the staging (the forward's down tile).
__device__ __forceinline__ void stage(unsigned char* staging, int t, const float (&acc)[kValues]) {
  const int lane = t % 32;
  const int row0 = 64 * (t / 128) + 16 * ((t % 128) / 32) + lane / 4;
#pragma unroll
  for (int chunk = 0; chunk < kBlocks; ++chunk) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int row = row0 + 8 * hf;
      *reinterpret_cast<unsigned*>(staging + staged_at(row, chunk) + (lane % 4) * 4) =
          pack(acc[4 * chunk + 2 * hf], acc[4 * chunk + 2 * hf + 1]);
    }
  }
}

// The staged tile to rows row0 .. +128, columns col0 .. +256 of a row-major bf16 matrix with `ld` columns: a warp
// stores one row's 512 bytes per step. kStream: the weight gradients, written once and not read again in the
// kernel, go out evict-first (st.global.cs) so they keep less of L2 from dh and the weights.
template <bool kStream>
__device__ __forceinline__ void store(const unsigned char* staging, int t, unsigned char* dst, int ld, size_t row0,
                                      int col0) {
  constexpr int kChunks = kTileN / 8;
#pragma unroll 4
  for (int i = t; i < kTileM * kChunks; i += kThreads) {
    const int row = i / kChunks, chunk = i % kChunks;
    const int4 v = *reinterpret_cast<const int4*>(staging + staged_at(row, chunk));
    int4* at = reinterpret_cast<int4*>(dst + ((row0 + row) * ld + col0 + chunk * 8) * 2);
    if (kStream) {
      __stcs(at, v);
    } else {
      *at = v;
    }
  }
}
}  // namespace

extern "C" __device__ void moe_bwd_epilogue_tile(pl_ctx ctx, pl_bind_moe_bwd_epilogue b, float (&acc)[kValues]) {
  // The entry: two 16-byte reads (table_header and tile_words are multiples of 4). Plain loads: the plan wrote the
  // table earlier in this launch.
  const int4* entry = reinterpret_cast<const int4*>(b.table) + (b.table_header + ctx.tile * b.tile_words) / 4;
  const int4 w0 = entry[0], w1 = entry[1];
  const int kind = w0.x, expert = w0.y, row0 = w0.z, m0 = w1.x, n0 = w1.y;
  const int t = ctx.thread;
  unsigned char* staging = ctx.smem + b.staging;
  pl_bar_sync(b.staged, kThreads);  // the previous tile's stores have read staging
  if (kind == kDa) {
    swiglu_backward(b.h, b.dh, 2 * b.I, t, row0, n0, acc);
    pl_bar_sync(b.staged, kThreads);  // every thread's stores are issued
    if (t == 0) {
      __threadfence();  // release: the tile's stores before the count
      atomicAdd(reinterpret_cast<int*>(b.done) + row0 / kTileM, 1);
    }
    return;
  }
  stage(staging, t, acc);
  pl_bar_sync(b.staged, kThreads);  // the whole tile is staged
  if (kind == kDw2) {
    store<true>(staging, t, reinterpret_cast<unsigned char*>(b.dw2), b.I,
                static_cast<size_t>(expert) * b.H + m0, n0);
  } else if (kind == kDxp) {
    store<false>(staging, t, b.dxp, b.H, row0, n0);
  } else {
    store<true>(staging, t, reinterpret_cast<unsigned char*>(b.dw1), b.H,
                static_cast<size_t>(expert) * 2 * b.I + m0, n0);
  }
}

// moe_mainloop: the grouped expert GEMM mainloop of the MoE layer, as a pipelink component.
//
//   gate/up tile (kind 0): acc = X[row_token[row0 .. +128], :] . W1[e, n0 .. +256, :]^T   (K = H)
//   down tile    (kind 1): acc = Hid[row0 .. +128, :]          . W2[e, n0 .. +256, :]^T   (K = I)
//
// The tile (expert e, first row, first column, kind) comes from the permute's table, indexed by
// ctx.tile. A's rows are gathered: the producer warpgroup copies them with cp.async (8 threads per
// 128-byte row of a 64-wide k-tile, padding rows zero-filled) into the 128B-swizzled layout WGMMA
// reads, and thread 0 loads B with the TMA engine; a stage is full when every copy has landed.
// A down tile's rows are the SwiGLU output of its m-tile: the producer waits until the epilogue
// has counted every gate/up tile of that m-tile as stored (`done`, release/acquire at gpu scope).
// The tiles of the table come gate/up first, so that wait is always on earlier tiles, which blocks
// already running (the link keeps every block resident) finish.
//
// The consumer side is gemm_mainloop's: two warpgroups, WGMMA on the stage, release it on "empty".
// K differs between the two kinds, so the ring position of a tile's first k-tile is counted from
// how many of this block's earlier tiles were of each kind.

#include <cute/tensor.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>

using namespace cute;

namespace {
constexpr int kTileM = 128;
constexpr int kTileK = 64;
constexpr int kTileN = pl_facts::tile_n;
using Bf16 = cutlass::bfloat16_t;

using Atom = SM90::GMMA::MMA_64x256x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>;
using TiledMma = decltype(make_tiled_mma(Atom{}, Layout<Shape<_2, _1, _1>>{}));
using LayoutA = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Bf16>{}, Shape<Int<kTileM>, Int<kTileK>>{}));
using LayoutB = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Bf16>{}, Shape<Int<kTileN>, Int<kTileK>>{}));
using AccLayout = decltype(partition_fragment_C(TiledMma{}, Shape<Int<kTileM>, Int<kTileN>>{}).layout());
constexpr int kAccValues = kTileM * kTileN / pl_facts::consumer_threads;
static_assert(kTileN == 256 && pl_facts::consumer_threads == 256, "two consumer warpgroups, 64 x 256 wgmma");
static_assert(pl_facts::producer_threads == 128, "the gather's row mapping: 16 rows of 8 chunks per pass");
static_assert(cosize(AccLayout{}) == kAccValues, "the acc port holds the whole wgmma C fragment");
constexpr int kStageBytesA = kTileM * kTileK * 2;
constexpr int kStageBytesB = kTileN * kTileK * 2;
constexpr bool kHalves = pl_facts::b_halves != 0;  // W1 as [gate; up] halves per expert: gathered (the contract)

struct TableTile { int expert, row0, n0, kind; };

// The table's layout is the permute's: table_header int32 words, then tile_words words per entry.
__device__ __forceinline__ TableTile tile_of(const pl_bind_moe_mainloop& b, int tile) {
  const int4 t = *reinterpret_cast<const int4*>(b.table + 4 * (b.table_header + tile * b.tile_words));
  return TableTile{t.x, t.y, t.z, t.w};
}

// Position in this block's stream of ring stages of the tile's first k-tile. The block's tiles are
// blockIdx.x + i * gridDim.x (i = ctx.iter); the first `gate_up` tiles of the table have H / 64
// k-tiles, the others I / 64.
__device__ __forceinline__ int first_stage(const pl_ctx& ctx, const unsigned char* table, int H, int I) {
  const int gate_up = reinterpret_cast<const int*>(table)[1];
  const int mine = gate_up > static_cast<int>(blockIdx.x) ? (gate_up - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  const int before = min(ctx.iter, mine);
  return before * (H / kTileK) + (ctx.iter - before) * (I / kTileK);
}

__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}

__device__ __forceinline__ void cp_async_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
}  // namespace

extern "C" __device__ void moe_mainloop_load(pl_ctx ctx, pl_bind_moe_mainloop b) {
  const TableTile tile = tile_of(b, ctx.tile);
  const bool down = tile.kind != 0;
  const int K = down ? b.I : b.H;
  const int k_tiles = K / kTileK;
  const int pos0 = first_stage(ctx, b.table, b.H, b.I);
  if (down) {  // this m-tile's SwiGLU rows must all be stored
    if (ctx.thread == 0) {
      const int want = 2 * b.I / kTileN;
      const unsigned char* done = b.done + 4 * (tile.row0 / kTileM);
      while (pl_ld_acquire_int(done) < want) __nanosleep(64);
    }
    pl_bar_sync(b.rows_ready, 128);
  } else if (ctx.iter == 0 && ctx.thread == 0) {
    pl_tma_prefetch_map(b.w1);
    pl_tma_prefetch_map(b.w2);
  }
  // Thread t copies 16-byte chunk c = t % 8 of rows t / 8 + 16 p (p = 0 .. 7): a warp reads four
  // whole 128-byte row segments. In the 128B swizzle chunk c of row r sits at chunk c ^ (r % 8),
  // and r % 8 is the same for all eight rows of a thread.
  const int chunk = ctx.thread % 8, r0 = ctx.thread / 8;
  const uint32_t dst0 = r0 * 128 + ((chunk ^ (r0 % 8)) * 16);
  const Bf16* src[8];
  bool valid[8];
  const Bf16* tokens = reinterpret_cast<const Bf16*>(b.tokens);
  const Bf16* hidden = reinterpret_cast<const Bf16*>(b.hidden);
  const int* row_token = reinterpret_cast<const int*>(b.row_token);
#pragma unroll
  for (int p = 0; p < 8; ++p) {
    const int row = tile.row0 + r0 + 16 * p;
    if (down) {
      src[p] = hidden + static_cast<size_t>(row) * b.I + chunk * 8;
      valid[p] = true;
    } else {
      const int token = row_token[row];
      valid[p] = token >= 0;
      src[p] = tokens + static_cast<size_t>(valid[p] ? token : 0) * b.H + chunk * 8;
    }
  }
  const uint32_t ring_a = pl_smem_addr(ctx.smem + b.a_ring);
  const uint32_t ring_b = pl_smem_addr(ctx.smem + b.b_ring);
  const pl_tensor_map* map = down ? b.w2 : b.w1;
  const int b_row = tile.expert * (down ? b.H : 2 * b.I) + tile.n0;
  // Gathering from halves (b_halves): a gate/up tile's B is the expert's gate rows n0 / 2 .. + tile_n / 2, then the
  // matching up rows, I further on; two boxes of tile_n / 2 rows, the second 1024-byte aligned (its swizzle unchanged).
  const int gate_row = tile.expert * 2 * b.I + tile.n0 / 2;
  for (int k = 0; k < k_tiles; ++k) {
    const int n = pos0 + k;
    const int stage = n % b.stages;
    pl_mbar_wait(pl_mbar(ctx, b.empty, stage), ((n / b.stages) & 1) ^ 1);
    const uint32_t full = pl_mbar(ctx, b.full, stage);
    if (ctx.thread == 0) {
      pl_mbar_arrive_expect_tx(full, kStageBytesB);
      if (kHalves && !down) {
        pl_tma_load_2d(ring_b + stage * kStageBytesB, map, k * kTileK, gate_row, full);
        pl_tma_load_2d(ring_b + stage * kStageBytesB + kStageBytesB / 2, map, k * kTileK, gate_row + b.I, full);
      } else {
        pl_tma_load_2d(ring_b + stage * kStageBytesB, map, k * kTileK, b_row, full);
      }
    }
    const uint32_t dst = ring_a + stage * kStageBytesA + dst0;
#pragma unroll
    for (int p = 0; p < 8; ++p) cp_async_16(dst + p * 16 * 128, src[p] + k * kTileK, valid[p]);
    cp_async_arrive(full);
  }
}

extern "C" __device__ void moe_mainloop_mma(pl_ctx ctx, pl_bind_moe_mainloop b, float (&acc)[kAccValues]) {
  TiledMma mma;
  auto thread_mma = mma.get_thread_slice(ctx.thread);
  Tensor accum = make_tensor(make_rmem_ptr(&acc[0]), AccLayout{});
  Bf16* ring_a = reinterpret_cast<Bf16*>(ctx.smem + b.a_ring);
  Bf16* ring_b = reinterpret_cast<Bf16*>(ctx.smem + b.b_ring);
  const TableTile tile = tile_of(b, ctx.tile);
  const int k_tiles = (tile.kind != 0 ? b.I : b.H) / kTileK;
  const int pos0 = first_stage(ctx, b.table, b.H, b.I);
  const bool signals = (ctx.thread & 31) == 0;
  int prev_stage = 0;

  mma.accumulate_ = GMMA::ScaleOut::Zero;
  warpgroup_fence_operand(accum);
  for (int k = 0; k < k_tiles; ++k) {
    const int n = pos0 + k;
    const int stage = n % b.stages;
    pl_mbar_wait(pl_mbar(ctx, b.full, stage), (n / b.stages) & 1);
    // A was written by cp.async (the generic proxy); WGMMA reads shared memory through the async proxy.
    pl_fence_proxy_async();
    Tensor sA = make_tensor(make_smem_ptr(ring_a + stage * (kStageBytesA / 2)), LayoutA{});
    Tensor sB = make_tensor(make_smem_ptr(ring_b + stage * (kStageBytesB / 2)), LayoutB{});
    Tensor tA = thread_mma.make_fragment_A(thread_mma.partition_A(sA));
    Tensor tB = thread_mma.make_fragment_B(thread_mma.partition_B(sB));
    warpgroup_arrive();
    CUTE_UNROLL
    for (int kb = 0; kb < size<2>(tA); ++kb) {
      cute::gemm(mma, tA(_, _, kb), tB(_, _, kb), accum);
      mma.accumulate_ = GMMA::ScaleOut::One;
    }
    warpgroup_commit_batch();
    warpgroup_wait<1>();
    if (k > 0 && signals) pl_mbar_arrive(pl_mbar(ctx, b.empty, prev_stage));
    prev_stage = stage;
  }
  warpgroup_wait<0>();
  if (k_tiles > 0 && signals) pl_mbar_arrive(pl_mbar(ctx, b.empty, prev_stage));
  warpgroup_fence_operand(accum);
}

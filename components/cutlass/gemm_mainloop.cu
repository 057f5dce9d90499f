// gemm_mainloop: a warp-specialized sm90 GEMM mainloop built on CuTe, as a pipelink component.
//
//   acc[tile_m x tile_n] (fp32, registers) = A[tile_row * tile_m : +tile_m, :] . B[tile_col * tile_n : +tile_n, :]^T
//
// A [M, K] and B [N, K] are bf16, K-major (B laid out like an nn.Linear weight). One producer
// thread streams tile_m x 64 and tile_n x 64 boxes of both with the TMA engine into a `stages`-deep
// ring of 128B-swizzled tiles; two consumer warpgroups wait on each stage's "full" mbarrier, issue
// WGMMA (CuTe's SM90 GMMA atoms) on it, and free the stage on its "empty" mbarrier once their MMAs
// have read it. In a 128-row tile each warpgroup takes 64 rows; in a 64-row tile (small M: fewer
// padded rows) the two take the two halves of its columns. With b_halves, B is a gated MLP's gate and up weights
// one after the other (as a model keeps them) and each tile gathers its rows interleaved every G = gate_group (tile
// row order: G gate rows, the G matching up rows, ...), so a SwiGLU epilogue finds gate and up in one thread, with
// no interleaved copy of the weight. The accumulator is the `acc` register
// port: its fragment layout (CuTe's partition of the wgmma C tile) is in the contract, so an
// epilogue written elsewhere can take it in registers. pipelink's glue owns the persistent tile
// loop (ctx.tile_row/col/iter), the mbarriers (initialized with the contract's counts) and the
// setmaxnreg budgets.
//
// Why not CUTLASS's CollectiveMma: its Params hold TMA copy objects that host C++ builds
// (make_tma_copy). Here the tensor maps come from pipelink's runtime (cuTensorMapEncodeTiled on
// the caller's arrays), so the mainloop is written one level down, with CuTe's layouts and atoms.

#include <cute/tensor.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
// The wgmma shapes past 128 and 256 (64 x 144, 64 x 208: tile widths that fill the SMs' last wave, bench/NOTES.md,
// twentieth session) are CuTe's "extended" atoms, which its headers include only under a macro. Included by name
// instead: a #define before the includes would not reach the monolithic control, whose unit hoists every
// component's system includes in front of its code.
#include <cute/arch/mma_sm90_gmma_ext.hpp>
#include <cute/atom/mma_traits_sm90_gmma_ext.hpp>

using namespace cute;

namespace {
constexpr int kTileM = pl_facts::tile_m;
constexpr int kTileK = 64;  // 64 bf16 = 128 bytes: one 128B-swizzle span per row
constexpr int kTileN = pl_facts::tile_n;
// 0, or the rows of each gate (and up) piece a tile gathers from B's two halves (b_halves: the contract)
constexpr int kGather = pl_facts::b_halves ? pl_facts::gate_group : 0;
static_assert(kGather == 0 || kTileN % (2 * kGather) == 0, "a tile holds whole gate/up piece pairs");
using Bf16 = cutlass::bfloat16_t;

// The wgmma of one warpgroup: 64 rows by the warpgroup's columns (all of the tile's, or half of a 64-row tile's).
template <int N> struct Atom;
template <> struct Atom<64> { using type = SM90::GMMA::MMA_64x64x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>; };
template <> struct Atom<72> { using type = SM90::GMMA::MMA_64x72x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>; };
template <> struct Atom<104> { using type = SM90::GMMA::MMA_64x104x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>; };
template <> struct Atom<128> { using type = SM90::GMMA::MMA_64x128x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>; };
template <> struct Atom<256> { using type = SM90::GMMA::MMA_64x256x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>; };
template <> struct Atom<144> { using type = SM90::GMMA::MMA_64x144x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>; };
template <> struct Atom<208> { using type = SM90::GMMA::MMA_64x208x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>; };
template <> struct Atom<200> { using type = SM90::GMMA::MMA_64x200x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>; };

// 128-row tiles: the two warpgroups stacked along M (warpgroup w owns rows 64w .. 64w+63). 64-row tiles: side by
// side along N (warpgroup w owns columns w tile_n / 2 ..), so both stay busy and hold half the sums each.
static_assert(kTileM == 128 || kTileM == 64, "tile_m is 64 or 128");
constexpr int kWarpgroupN = kTileM == 128 ? kTileN : kTileN / 2;
using WarpgroupLayout = std::conditional_t<kTileM == 128, Layout<Shape<_2, _1, _1>>, Layout<Shape<_1, _2, _1>>>;
using TiledMma = decltype(make_tiled_mma(typename Atom<kWarpgroupN>::type{}, WarpgroupLayout{}));
// The layout TMA writes with SWIZZLE_128B for a box of (rows x 64) bf16: rows of 128 bytes, the
// 16-byte chunks of row r XOR-ed with r % 8. GMMA's K-major SW128 atom is exactly that.
using LayoutA = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Bf16>{}, Shape<Int<kTileM>, Int<kTileK>>{}));
using LayoutB = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Bf16>{}, Shape<Int<kTileN>, Int<kTileK>>{}));
using AccLayout = decltype(partition_fragment_C(TiledMma{}, Shape<Int<kTileM>, Int<kTileN>>{}).layout());
constexpr int kAccValues = kTileM * kTileN / pl_facts::consumer_threads;
static_assert(pl_facts::consumer_threads == 256, "two consumer warpgroups");
static_assert(cosize(AccLayout{}) == kAccValues, "the acc port holds the whole wgmma C fragment");
constexpr int kStageBytesA = kTileM * kTileK * 2;
constexpr int kStageBytesB = kTileN * kTileK * 2;
}  // namespace

// In a cluster the blocks share one operand's tile by TMA multicast, so it crosses from L2 once per cluster.
// share_a = 0 (pairs): the two blocks hold tiles (2 r, c) and (2 r + 1, c), the same B tile. Each loads its own A
// box and one half of B (tile_n / 2 rows), multicast into both blocks' rings at the same offset.
// share_a = 1 (2 or 4 blocks): they hold tiles (r, c .. c + cluster_ctas - 1), the same A tile (small M, where each
// block would otherwise read all of A from L2 for every tile). Each loads its own B box and a 1 / cluster_ctas
// slice of A's rows, multicast into every block's ring.
// A stage may then be refilled only when the consumers of every block have released it: the "empty" barriers
// count the consumer warps of the whole cluster, and each consumer warp arrives on its own and on its peers'.
extern "C" __device__ void gemm_mainloop_load(pl_ctx ctx, pl_bind_gemm_mainloop b) {
  if (ctx.thread != 0) return;  // one thread issues every copy of the producer warpgroup
  if (ctx.iter == 0) {
    pl_tma_prefetch_map(b.a);
    pl_tma_prefetch_map(b.b);
  }
  const uint32_t ring_a = pl_smem_addr(ctx.smem + b.a_ring);
  const uint32_t ring_b = pl_smem_addr(ctx.smem + b.b_ring);
  const unsigned rank = b.cluster_ctas > 1 ? pl_cluster_rank() : 0;
  const int a_rows = b.share_a ? kTileM / b.cluster_ctas : kTileM;  // rows of the shared operand this block loads
  const int b_rows = b.share_a ? kTileN : kTileN / b.cluster_ctas;  // (for every block of the cluster)
  const uint16_t everyone = static_cast<uint16_t>((1u << b.cluster_ctas) - 1);
  // The k-tiles of this call, [k_begin, k_end): the glue's schedule ([schedule] k_tiles in the contract).
  for (int k = ctx.k_begin; k < ctx.k_end; ++k) {
    const int n = ctx.stage_base + (k - ctx.k_begin);  // position in this block's stream of stages
    const int stage = n % b.stages;
    // A fresh mbarrier counts as having completed the phase before phase 0: waiting on the
    // opposite parity lets the first pass over the ring through.
    pl_mbar_wait(pl_mbar(ctx, b.empty, stage), ((n / b.stages) & 1) ^ 1);
    const uint32_t full = pl_mbar(ctx, b.full, stage);
    pl_mbar_arrive_expect_tx(full, kStageBytesA + kStageBytesB);  // all of B arrives, from every block
    if (b.cluster_ctas == 1 || !b.share_a) {
      pl_tma_load_2d(ring_a + stage * kStageBytesA, b.a, k * kTileK, ctx.tile_row * kTileM, full);
    } else {
      pl_tma_load_2d_multicast(ring_a + stage * kStageBytesA + rank * a_rows * kTileK * 2, b.a, k * kTileK,
                               ctx.tile_row * kTileM + rank * a_rows, full, everyone);
    }
    if (kGather > 0) {
      // Piece q of the tile: G gate rows (q even) or the G up rows that match them (q odd), from the two halves
      // of B. Each piece starts 1024-byte aligned (G >= 8 rows of 128 bytes), so the 128B swizzle it gets from
      // TMA is the one the whole tile would have had.
#pragma unroll
      for (int q = 0; q < kTileN / kGather; ++q) {
        const int row = (q % 2) * (b.N / 2) + ctx.tile_col * (kTileN / 2) + (q / 2) * kGather;
        pl_tma_load_2d(ring_b + stage * kStageBytesB + q * kGather * kTileK * 2, b.b, k * kTileK, row, full);
      }
    } else if (b.cluster_ctas == 1 || b.share_a) {
      pl_tma_load_2d(ring_b + stage * kStageBytesB, b.b, k * kTileK, ctx.tile_col * kTileN, full);
    } else {
      pl_tma_load_2d_multicast(ring_b + stage * kStageBytesB + rank * b_rows * kTileK * 2, b.b, k * kTileK,
                               ctx.tile_col * kTileN + rank * b_rows, full, everyone);
    }
  }
}

extern "C" __device__ void gemm_mainloop_mma(pl_ctx ctx, pl_bind_gemm_mainloop b, float (&acc)[kAccValues]) {
  TiledMma mma;
  auto thread_mma = mma.get_thread_slice(ctx.thread);
  Tensor accum = make_tensor(make_rmem_ptr(&acc[0]), AccLayout{});
  Bf16* ring_a = reinterpret_cast<Bf16*>(ctx.smem + b.a_ring);
  Bf16* ring_b = reinterpret_cast<Bf16*>(ctx.smem + b.b_ring);
  const bool signals = (ctx.thread & 31) == 0;  // one arrival per consumer warp (and block) frees a stage
  int prev_stage = 0;
  auto release = [&](int stage) {
    const uint32_t empty = pl_mbar(ctx, b.empty, stage);
    if (b.cluster_ctas == 1) {
      pl_mbar_arrive(empty);
    } else {
      for (int peer = 0; peer < b.cluster_ctas; ++peer) pl_mbar_arrive_cluster(empty, peer);
    }
  };

  mma.accumulate_ = GMMA::ScaleOut::Zero;  // the first k-tile overwrites whatever acc held
  warpgroup_fence_operand(accum);
  for (int k = ctx.k_begin; k < ctx.k_end; ++k) {
    const int n = ctx.stage_base + (k - ctx.k_begin);
    const int stage = n % b.stages;
    pl_mbar_wait(pl_mbar(ctx, b.full, stage), (n / b.stages) & 1);
    // Descriptors for this stage: the layouts are static, only the base address moves.
    Tensor sA = make_tensor(make_smem_ptr(ring_a + stage * (kStageBytesA / 2)), LayoutA{});
    Tensor sB = make_tensor(make_smem_ptr(ring_b + stage * (kStageBytesB / 2)), LayoutB{});
    Tensor tA = thread_mma.make_fragment_A(thread_mma.partition_A(sA));  // (MMA, MMA_M, MMA_K)
    Tensor tB = thread_mma.make_fragment_B(thread_mma.partition_B(sB));
    warpgroup_arrive();
    CUTE_UNROLL
    for (int kb = 0; kb < size<2>(tA); ++kb) {
      cute::gemm(mma, tA(_, _, kb), tB(_, _, kb), accum);
      mma.accumulate_ = GMMA::ScaleOut::One;
    }
    warpgroup_commit_batch();
    // Keep this k-tile's MMAs in flight; the previous k-tile's are done once at most one batch
    // is outstanding, so its stage can go back to the producer.
    warpgroup_wait<1>();
    if (k > ctx.k_begin && signals) release(prev_stage);
    prev_stage = stage;
  }
  warpgroup_wait<0>();
  if (ctx.k_end > ctx.k_begin && signals) release(prev_stage);
  warpgroup_fence_operand(accum);
}

// moe_bwd_mainloop: the grouped GEMM mainloop of the MoE layer's backward pass, as a pipelink component
// (docs/design/moe_training.md, "The backward link's components: the interface").
//
// Each tile of the plan's table ({kind, expert e, row0, rows, m0, n0, pos0, 0}) is one 128 x 256 fp32 tile:
//
//   kind 0  da  = do W2_e           acc(m, n) = sum_k dout[row0 + m, k] * w2[e H + k, n0 + n]       K = H
//   kind 1  dW2 = do_e^T a_e        acc(m, n) = sum_k dout[row0 + k, m0 + m] * a[row0 + k, n0 + n]  K = rows
//   kind 2  dxp = dh W1_e           acc(m, n) = sum_k dh[row0 + m, k] * w1[e 2I + k, n0 + n]        K = 2 I
//   kind 3  dW1 = dh_e^T xp_e       acc(m, n) = sum_k dh[row0 + k, m0 + m] * x[tok(row0 + k), n0 + n] K = rows
//                                   (tok = row_token; the term is 0 where it is -1, a padding row)
//
// WGMMA's A is M x K and its B is N x K (D = A B^T); which of the two dimensions is contiguous in shared
// memory ("major") follows from where the data lies in global memory:
//
//   kind  A (128 x 64 per k-step)                           B (256 x 64 per k-step)
//   0     dout rows, K-major (k contiguous), cp.async         w2 rows e H + k, N-major (n contiguous), TMA
//   1     dout^T: m = column of dout, M-major, cp.async      a rows, N-major, cp.async
//   2     dh rows, K-major, cp.async                          w1 rows e 2I + k, N-major, TMA
//   3     dh^T: m = column of dh, M-major, cp.async          x rows gathered by row_token, N-major, cp.async
//
// Shared-memory layouts (CuTe, 128B swizzle, each stage 1024-byte aligned):
//   K-major A (kinds 0, 2): tile_to_shape(Layout_K_SW128_Atom, (128, 64)): row m is 128 bytes (the 64 k of the
//     k-step), 16-byte chunk c of row m at chunk c ^ (m % 8): the forward's layout.
//   M/N-major A and B: tile_to_shape(Layout_MN_SW128_Atom, (MN, 64), Step<_2, _1>): the K atoms (8 k each) first,
//     so each 64-wide MN slice of the k-step is one contiguous 8 KB block of 64 "rows" k of 128 bytes (64 mn),
//     chunk c of row k at chunk c ^ (k % 8): ((64, MN/64), (8, 8)) : ((1, 4096), (64, 512)) elements, swizzle
//     Sw<3,3,3> on element offsets. That is byte for byte what a TMA box of 64 rows (k) x 64 columns (n) with
//     swizzle 128 writes, so B's four 8 KB blocks are four TMA boxes at columns n0 + 64 q (checked below at
//     compile time, every chunk of the three tiles: layouts_are_the_boxes; it fails with Step<_1, _2>, MN atoms
//     first). The WGMMA descriptor of this layout (make_gmma_desc<Major::MN>, whose static checks it passes):
//     LBO = 8 KB (the next 64-wide MN block), SBO = 1 KB (the next 8 k). In the SASS: HGMMA.64x256x16 .tnspB for
//     kinds 0 and 2, .tnspA.tnspB for kinds 1 and 3.
//   cp.async destinations come from the same CuTe layouts (as_position_independent_swizzle_layout: the swizzle
//     as it acts on element offsets from a 1024-byte aligned base); a 16-byte chunk is 8 consecutive elements
//     along the contiguous dimension, which the layout keeps consecutive.
//
// The pipeline is the forward's (moe_mainloop): one producer warpgroup, two consumer warpgroups (64 rows each),
// a ring of `stages` stages with full/empty mbarriers. A stage is full when every producer thread's cp.async
// copies have landed (cp.async.mbarrier.arrive.noinc: one arrival per thread) and thread 0 has arrived once
// more: with the 32 KB of B's TMA boxes announced (kinds 0, 2), or plainly (kinds 1, 3: no TMA bytes), so the
// full barrier always counts producer_threads + 1 arrivals. The ring position of a tile's first k-step is the
// table's pos0; stage = (pos0 + k) % stages, phase parity ((pos0 + k) / stages) & 1.
//
// Kinds 2 and 3 read dh, which the epilogue of this kernel's kind 0 tiles writes: thread 0 of the producer
// waits (acquire) until done[m] == I / 256 (every kind 0 tile of m-tile m stored) for the m-tile of a kind 2
// tile, or for every m-tile of the expert for a kind 3 tile, then the producer warpgroup meets on rows_ready.
// An expert without tokens (rows == 0, kinds 1 and 3) has no k-step: nothing is loaded and the consumer hands
// out zeros.

#include <cute/tensor.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>

using namespace cute;

namespace {
constexpr int kTileM = 128;
constexpr int kTileK = 64;
constexpr int kTileN = pl_facts::tile_n;
constexpr int kBox = 64;  // a TMA box of B: 64 k x 64 n
using Bf16 = cutlass::bfloat16_t;

// Kinds 0 and 2: A K-major, B N-major. Kinds 1 and 3: both MN-major. Two warpgroups along M.
using AtomKN = SM90::GMMA::MMA_64x256x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::MN>;
using AtomNN = SM90::GMMA::MMA_64x256x16_F32BF16BF16_SS<GMMA::Major::MN, GMMA::Major::MN>;
using MmaKN = decltype(make_tiled_mma(AtomKN{}, Layout<Shape<_2, _1, _1>>{}));
using MmaNN = decltype(make_tiled_mma(AtomNN{}, Layout<Shape<_2, _1, _1>>{}));

using LayoutAK = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Bf16>{}, Shape<Int<kTileM>, Int<kTileK>>{}));
using LayoutAM = decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<Bf16>{}, Shape<Int<kTileM>, Int<kTileK>>{},
                                        Step<_2, _1>{}));
using LayoutBN = decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<Bf16>{}, Shape<Int<kTileN>, Int<kTileK>>{},
                                        Step<_2, _1>{}));
// The same layouts as functions of (mn or m, k) to element offsets from a 1024-byte aligned stage base.
using OffsetAK = decltype(as_position_independent_swizzle_layout(LayoutAK{}));
using OffsetAM = decltype(as_position_independent_swizzle_layout(LayoutAM{}));
using OffsetBN = decltype(as_position_independent_swizzle_layout(LayoutBN{}));

using AccLayout = decltype(partition_fragment_C(MmaKN{}, Shape<Int<kTileM>, Int<kTileN>>{}).layout());
using AccLayoutNN = decltype(partition_fragment_C(MmaNN{}, Shape<Int<kTileM>, Int<kTileN>>{}).layout());
constexpr int kAccValues = kTileM * kTileN / pl_facts::consumer_threads;
static_assert(kTileN == 256 && pl_facts::consumer_threads == 256, "two consumer warpgroups, 64 x 256 wgmma");
static_assert(pl_facts::producer_threads == 128, "the copies' thread mapping: one warpgroup");
static_assert(cosize(AccLayout{}) == kAccValues, "the acc port holds the whole wgmma C fragment");
static_assert(is_same_v<AccLayout, AccLayoutNN>, "both MMAs hand out the same C fragment (the acc port's)");

constexpr int kStageBytesA = kTileM * kTileK * 2;  // 16 KB
constexpr int kStageBytesB = kTileN * kTileK * 2;  // 32 KB
constexpr int kBoxBytes = kBox * kBox * 2;          // 8 KB
static_assert(cosize(LayoutAK{}) * 2 == kStageBytesA && cosize(LayoutAM{}) * 2 == kStageBytesA, "A stage");
static_assert(cosize(LayoutBN{}) * 2 == kStageBytesB, "B stage");
// What the TMA engine writes for a box of 64 rows of 64 bf16 with the 128B swizzle, and what the forward's cp.async
// writes for a K-major tile (guide.md, "TMA layouts"): chunk c (8 elements) of row r at chunk c ^ (r % 8), rows
// 128 bytes apart; in elements.
constexpr int swizzled_128b(int row, int col) { return row * 64 + (((col / 8) ^ (row % 8)) * 8) + col % 8; }

// The three tiles checked at compile time, every 16-byte chunk (what one copy writes) of every row: the MN-major
// tiles are 64-wide blocks of 8 KB, each the TMA box of rows k, columns mn % 64; the K-major tile is rows m of
// 128 bytes, the forward's layout; and a chunk's 8 elements are consecutive. (A host program compared every
// element of the three tiles the same way when this was written.) In slices of 8 rows: the compiler bounds the
// work of one constant expression.
template <int kRow0>
constexpr bool layouts_are_the_boxes() {
  for (int r = kRow0; r < kRow0 + 8; ++r) {
    for (int mn = 0; mn < kTileN; mn += 8) {  // r: the k-row of the MN-major tiles
      const int box = (mn / kBox) * kBox * kBox + swizzled_128b(r, mn % kBox);
      if (OffsetBN{}(mn, r) != box || (mn < kTileM && OffsetAM{}(mn, r) != box)) return false;
    }
    for (int k = 0; k < kTileK; k += 8)  // r and r + 64: rows m of the K-major tile
      if (OffsetAK{}(r, k) != swizzled_128b(r, k) || OffsetAK{}(r + 64, k) != swizzled_128b(r + 64, k)) return false;
    for (int j = 1; j < 8; ++j)
      if (OffsetBN{}(136 + j, r) != OffsetBN{}(136, r) + j || OffsetAM{}(72 + j, r) != OffsetAM{}(72, r) + j ||
          OffsetAK{}(r, 40 + j) != OffsetAK{}(r, 40) + j)
        return false;
  }
  return true;
}
static_assert(layouts_are_the_boxes<0>() && layouts_are_the_boxes<8>(), "MN: the TMA boxes'; K: the forward's");
static_assert(layouts_are_the_boxes<16>() && layouts_are_the_boxes<24>(), "MN: the TMA boxes'; K: the forward's");
static_assert(layouts_are_the_boxes<32>() && layouts_are_the_boxes<40>(), "MN: the TMA boxes'; K: the forward's");
static_assert(layouts_are_the_boxes<48>() && layouts_are_the_boxes<56>(), "MN: the TMA boxes'; K: the forward's");

// The layouts repeat every 8 rows (K-major: m; MN-major: k) but for a constant offset: the step the producer adds.
constexpr uint32_t kRowsAK16 = 2 * 16 * kTileK;  // 16 rows of the K-major A tile, in bytes
constexpr uint32_t kRows8 = 2 * 8 * kBox;        // 8 k-rows of an MN-major block, in bytes
static_assert(OffsetAK{}(16 + 5, 24) == OffsetAK{}(5, 24) + kRowsAK16 / 2 &&
                  OffsetAM{}(72, 8 + 3) == OffsetAM{}(72, 3) + kRows8 / 2 &&
                  OffsetBN{}(200, 56 + 6) == OffsetBN{}(200, 6) + 7 * kRows8 / 2,
              "8 rows further: the same swizzle");

enum Kind : int { kDa = 0, kDw2 = 1, kDxp = 2, kDw1 = 3 };

struct TableTile { int kind, expert, row0, rows, m0, n0, pos0; };

// The plan's table: table_header int32 words, then tile_words words per tile (two 16-byte reads).
__device__ __forceinline__ TableTile tile_of(const pl_bind_moe_bwd_mainloop& b, int tile) {
  const int4* at = reinterpret_cast<const int4*>(b.table + 4 * (b.table_header + tile * b.tile_words));
  const int4 t0 = at[0], t1 = at[1];
  return TableTile{t0.x, t0.y, t0.z, t0.w, t1.x, t1.y, t1.z};
}

__device__ __forceinline__ int k_steps(const pl_bind_moe_bwd_mainloop& b, const TableTile& t) {
  const int K = t.kind == kDa ? b.H : t.kind == kDxp ? 2 * b.I : t.rows;
  return K / kTileK;
}

__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}

__device__ __forceinline__ void cp_async_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}

// Kinds 0 and 2. A: 128 rows of `a_rows` (row0's row, pitch a_pitch elements), 64 k a step, K-major: thread t
// copies chunk t % 8 of rows t / 8 + 16 p (p = 0 .. 7). B: four TMA boxes of `map` a step (thread 0), rows
// b_row + 64 k (the k), columns n0 + 64 q (the n).
__device__ __forceinline__ void load_kn(const pl_ctx& ctx, const pl_bind_moe_bwd_mainloop& b, const Bf16* a_rows,
                                        int a_pitch, const pl_tensor_map* map, int b_row, int n0, int k_tiles,
                                        int pos0) {
  const uint32_t ring_a = pl_smem_addr(ctx.smem + b.a_ring);
  const uint32_t ring_b = pl_smem_addr(ctx.smem + b.b_ring);
  const int chunk = ctx.thread % 8, r0 = ctx.thread / 8;
  // Rows r0 + 16 p lie 16 rows (1024 elements) apart in the layout, the swizzle unchanged (it depends on row % 8).
  const uint32_t dst0 = 2 * OffsetAK{}(r0, chunk * 8);
  const Bf16* src = a_rows + static_cast<size_t>(r0) * a_pitch + chunk * 8;
  for (int k = 0; k < k_tiles; ++k) {
    const int n = pos0 + k;
    const int stage = n % b.stages;
    pl_mbar_wait(pl_mbar(ctx, b.empty, stage), ((n / b.stages) & 1) ^ 1);
    const uint32_t full = pl_mbar(ctx, b.full, stage);
    if (ctx.thread == 0) {
      pl_mbar_arrive_expect_tx(full, kStageBytesB);
#pragma unroll
      for (int q = 0; q < kTileN / kBox; ++q)
        pl_tma_load_2d(ring_b + stage * kStageBytesB + q * kBoxBytes, map, n0 + q * kBox, b_row + k * kTileK, full);
    }
    const uint32_t dst = ring_a + stage * kStageBytesA + dst0;
    const Bf16* from = src + k * kTileK;
#pragma unroll
    for (int p = 0; p < 8; ++p)
      cp_async_16(dst + p * kRowsAK16, from + static_cast<size_t>(16 * p) * a_pitch, true);
    cp_async_arrive(full);
  }
}

// Kinds 1 and 3: K runs over the expert's rows, both operands MN-major, all by cp.async.
// A: a_rows = the A matrix's row row0, column m0 (pitch a_pitch): k-row r holds the 128 m contiguously; thread t
// copies chunk t % 16 (m 8 (t % 16) ..) of k-rows t / 16 + 8 p (p = 0 .. 7): a warp reads two 256-byte rows.
// B: k-row r is b_rows + r * b_pitch (kind 1: a's row row0 + r, column n0) or, gathering (kind 3),
// b_rows + tok[r] * b_pitch (b_rows = x + n0, pitch H; zeros where tok[r] < 0); thread t copies chunk t % 32 of
// k-rows t / 32 + 4 p (p = 0 .. 15): a warp reads one 512-byte row, and lane l fetched the token of the warp's
// row l % 16 first.
template <bool kGather>
__device__ __forceinline__ void load_nn(const pl_ctx& ctx, const pl_bind_moe_bwd_mainloop& b, const Bf16* a_rows,
                                        int a_pitch, const Bf16* b_rows, int b_pitch, const int* tok, int k_tiles,
                                        int pos0) {
  const uint32_t ring_a = pl_smem_addr(ctx.smem + b.a_ring);
  const uint32_t ring_b = pl_smem_addr(ctx.smem + b.b_ring);
  const int ca = ctx.thread % 16, ra = ctx.thread / 16;
  const int cb = ctx.thread % 32, rb = ctx.thread / 32;
  // k-rows 8 apart lie 512 elements apart, the swizzle unchanged (it depends on k % 8): A's rows ra + 8 p are
  // dst_a0 + p * 1 KB; B's rows rb + 4 p are dst_b[p % 2] + (p / 2) * 1 KB.
  const uint32_t dst_a0 = 2 * OffsetAM{}(ca * 8, ra);
  const uint32_t dst_b0 = 2 * OffsetBN{}(cb * 8, rb), dst_b1 = 2 * OffsetBN{}(cb * 8, rb + 4);
  const Bf16* src_a = a_rows + static_cast<size_t>(ra) * a_pitch + ca * 8;
  const Bf16* src_b = b_rows + (kGather ? 0 : static_cast<size_t>(rb) * b_pitch) + cb * 8;
  for (int k = 0; k < k_tiles; ++k) {
    int token = 0;
    if (kGather) token = tok[k * kTileK + rb + 4 * (cb % 16)];  // before the wait: its latency overlaps it
    const int n = pos0 + k;
    const int stage = n % b.stages;
    pl_mbar_wait(pl_mbar(ctx, b.empty, stage), ((n / b.stages) & 1) ^ 1);
    const uint32_t full = pl_mbar(ctx, b.full, stage);
    if (ctx.thread == 0) pl_mbar_arrive(full);  // the arrival that carries B's TMA bytes in kinds 0 and 2
    const uint32_t dst_a = ring_a + stage * kStageBytesA + dst_a0;
    const Bf16* from_a = src_a + static_cast<size_t>(k * kTileK) * a_pitch;
#pragma unroll
    for (int p = 0; p < 8; ++p) cp_async_16(dst_a + p * kRows8, from_a + static_cast<size_t>(8 * p) * a_pitch, true);
    const uint32_t dst_b = ring_b + stage * kStageBytesB;
    const Bf16* from_b = src_b + (kGather ? 0 : static_cast<size_t>(k * kTileK) * b_pitch);
#pragma unroll
    for (int p = 0; p < 16; ++p) {
      const uint32_t to = dst_b + (p % 2 ? dst_b1 : dst_b0) + (p / 2) * kRows8;
      if (kGather) {
        const int row = __shfl_sync(0xffffffffu, token, p);
        cp_async_16(to, from_b + static_cast<size_t>(row < 0 ? 0 : row) * b_pitch, row >= 0);
      } else {
        cp_async_16(to, from_b + static_cast<size_t>(4 * p) * b_pitch, true);
      }
    }
    cp_async_arrive(full);
  }
}

// One k-step's four 64 x 256 x 16 WGMMAs of this warpgroup on a stage, with the tile's MMA (operand majors) and
// A layout. `scale` is ScaleOut::Zero on the tile's first k-step (the accumulator starts from zero), then One.
template <class Mma, class LayoutA>
__device__ __forceinline__ void wgmma_stage(int thread, Bf16* stage_a, Bf16* stage_b, float (&acc)[kAccValues],
                                            GMMA::ScaleOut& scale) {
  Mma mma;
  mma.accumulate_ = scale;
  auto thread_mma = mma.get_thread_slice(thread);
  Tensor accum = make_tensor(make_rmem_ptr(&acc[0]), AccLayout{});
  Tensor tA = thread_mma.make_fragment_A(thread_mma.partition_A(make_tensor(make_smem_ptr(stage_a), LayoutA{})));
  Tensor tB = thread_mma.make_fragment_B(thread_mma.partition_B(make_tensor(make_smem_ptr(stage_b), LayoutBN{})));
  CUTE_UNROLL
  for (int kb = 0; kb < size<2>(tA); ++kb) {
    cute::gemm(mma, tA(_, _, kb), tB(_, _, kb), accum);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  scale = GMMA::ScaleOut::One;
}
}  // namespace

extern "C" __device__ void moe_bwd_mainloop_load(pl_ctx ctx, pl_bind_moe_bwd_mainloop b) {
  const TableTile tile = tile_of(b, ctx.tile);
  const int k_tiles = k_steps(b, tile);
  if (ctx.iter == 0 && ctx.thread == 0) {
    pl_tma_prefetch_map(b.w1);
    pl_tma_prefetch_map(b.w2);
  }
  if (tile.kind == kDxp || tile.kind == kDw1) {  // dh rows: every kind 0 tile of their m-tiles stored
    if (ctx.thread == 0) {
      const int want = b.I / kTileN;
      const int first = tile.row0 / kTileM;
      const int end = tile.kind == kDxp ? first + 1 : (tile.row0 + tile.rows) / kTileM;
      for (int m = first; m < end; ++m)
        while (pl_ld_acquire_int(b.done + 4 * m) < want) __nanosleep(64);
    }
    pl_bar_sync(b.rows_ready, pl_facts::producer_threads);
  }
  const Bf16* dout = reinterpret_cast<const Bf16*>(b.dout);
  const Bf16* dh = reinterpret_cast<const Bf16*>(b.dh);
  const Bf16* a = reinterpret_cast<const Bf16*>(b.a);
  const Bf16* x = reinterpret_cast<const Bf16*>(b.x);
  const size_t row0 = tile.row0;
  switch (tile.kind) {
    case kDa:
      load_kn(ctx, b, dout + row0 * b.H, b.H, b.w2, tile.expert * b.H, tile.n0, k_tiles, tile.pos0);
      break;
    case kDw2:
      load_nn<false>(ctx, b, dout + row0 * b.H + tile.m0, b.H, a + row0 * b.I + tile.n0, b.I, nullptr, k_tiles,
                     tile.pos0);
      break;
    case kDxp:
      load_kn(ctx, b, dh + row0 * 2 * b.I, 2 * b.I, b.w1, tile.expert * 2 * b.I, tile.n0, k_tiles, tile.pos0);
      break;
    default:
      load_nn<true>(ctx, b, dh + row0 * 2 * b.I + tile.m0, 2 * b.I, x + tile.n0, b.H,
                    reinterpret_cast<const int*>(b.row_token) + row0, k_tiles, tile.pos0);
      break;
  }
}

extern "C" __device__ void moe_bwd_mainloop_mma(pl_ctx ctx, pl_bind_moe_bwd_mainloop b, float (&acc)[kAccValues]) {
  const TableTile tile = tile_of(b, ctx.tile);
  const int k_tiles = k_steps(b, tile);
  const bool mn_major = tile.kind == kDw2 || tile.kind == kDw1;  // A M-major (else K-major); B always N-major
  Bf16* ring_a = reinterpret_cast<Bf16*>(ctx.smem + b.a_ring);
  Bf16* ring_b = reinterpret_cast<Bf16*>(ctx.smem + b.b_ring);
  Tensor accum = make_tensor(make_rmem_ptr(&acc[0]), AccLayout{});
  const bool signals = (ctx.thread & 31) == 0;
  GMMA::ScaleOut scale = GMMA::ScaleOut::Zero;
  int prev_stage = 0;

  // The forward's (gemm_mainloop's) loop; only the WGMMAs of a k-step depend on the kind, so both kinds keep the
  // accumulator in the same registers.
  warpgroup_fence_operand(accum);
  for (int k = 0; k < k_tiles; ++k) {
    const int n = tile.pos0 + k;
    const int stage = n % b.stages;
    pl_mbar_wait(pl_mbar(ctx, b.full, stage), (n / b.stages) & 1);
    // cp.async wrote through the generic proxy; WGMMA reads shared memory through the async proxy.
    pl_fence_proxy_async();
    Bf16* stage_a = ring_a + stage * (kStageBytesA / 2);
    Bf16* stage_b = ring_b + stage * (kStageBytesB / 2);
    warpgroup_arrive();
    if (mn_major)
      wgmma_stage<MmaNN, LayoutAM>(ctx.thread, stage_a, stage_b, acc, scale);
    else
      wgmma_stage<MmaKN, LayoutAK>(ctx.thread, stage_a, stage_b, acc, scale);
    warpgroup_commit_batch();
    warpgroup_wait<1>();
    if (k > 0 && signals) pl_mbar_arrive(pl_mbar(ctx, b.empty, prev_stage));
    prev_stage = stage;
  }
  warpgroup_wait<0>();
  if (k_tiles > 0 && signals) pl_mbar_arrive(pl_mbar(ctx, b.empty, prev_stage));
  warpgroup_fence_operand(accum);
  // An expert without tokens (rows == 0): no k-step ran, its weight gradient is zero.
  const bool empty = k_tiles == 0;
#pragma unroll
  for (int v = 0; v < kAccValues; ++v) acc[v] = empty ? 0.0f : acc[v];
}

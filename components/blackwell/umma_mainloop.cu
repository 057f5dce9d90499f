// umma_mainloop: a warp-specialized sm_100a GEMM mainloop (TMA + tcgen05.mma) whose fp32 accumulator stays in tensor
// memory (TMEM), as a pipelink component.
//
//   C[128 x tile_n] (fp32, TMEM) = A[tile_row * 128 : +128, :] . B[tile_col * tile_n : +tile_n, :]^T
//
// A [M, K] and B [N, K] are bf16, K-major (B laid out like an nn.Linear weight). One producer thread streams 128 x 64
// boxes of A and tile_n x 64 boxes of B with the TMA engine into a `stages`-deep ring of 128B-swizzled tiles (the
// `full` / `empty` mbarriers, as gemm_mainloop). One elected thread of the mma warp issues tcgen05.mma on each stage (M = 128,
// N = tile_n, K = 16 per instruction, 4 per 64-wide k-tile) and frees the stage with tcgen05.commit onto its `empty`
// mbarrier: the commit arrives once the tensor core has finished reading it, with no thread waiting for that.
//
// The accumulator is the `acc` TMEM port, double-buffered: the tile of call `iter` goes to slot iter % 2, columns
// b.accum + slot * tile_n .. + tile_n - 1, lane = tile row (M = 128, cta_group::1: row i of D is TMEM lane i, column j
// is column j). The slot is handed over on two mbarrier arrays: acc_full[slot] (one tcgen05.commit after the tile's last
// MMAs) and acc_empty[slot] (the epilogue's 4 warps once they have read it). So the MMAs of tile i + 1 run while the
// epilogue drains tile i. The glue allocates the TMEM columns (tcgen05.alloc, once per block) and passes their address
// in b.accum; this component never allocates or frees tensor memory.
//
// Written in PTX rather than with CuTe's UMMA atoms: the two descriptors are a few constant bits (below, each
// explained), and the component then needs only pipelink/component.h (no CuTe to compile at pack time). Their values
// equal CuTe's (make_instr_desc, and make_umma_desc through SM100_MMA_F16BF16_SS's A / B fragments of
// UMMA::Layout_K_SW128_Atom tiles, per K step) for tile_n 64, 128 and 256, compared on the host. Not yet run on a
// Blackwell GPU.

namespace {
constexpr int kTileM = 128;  // the tcgen05.mma M of one CTA (cta_group::1): one accumulator row per TMEM lane
constexpr int kTileN = pl_facts::tile_n;
constexpr int kTileK = 64;   // 64 bf16 = 128 bytes: one 128B-swizzle span per row, one TMA box per operand and stage
constexpr int kMmaK = 16;    // kind::f16 reduces 32 bytes of K per instruction: 16 bf16
static_assert(kTileN % 16 == 0 && kTileN >= 16 && kTileN <= 256, "M = 128 needs N a multiple of 16, 16 .. 256");
constexpr int kStageBytesA = kTileM * kTileK * 2;
constexpr int kStageBytesB = kTileN * kTileK * 2;

// Shared-memory matrix descriptor (PTX ISA "tcgen05 Matrix Descriptors") of a K-major tile written by TMA with
// SWIZZLE_128B: rows of 128 bytes (64 bf16 of K), 8-row groups of 1024 bytes, the 16-byte chunk c of row r stored at
// chunk c ^ (r % 8). Fields, in 16-byte units where they are addresses or offsets:
//   [0, 14)  start address >> 4 (the tile's first byte; advanced by 32 bytes per K = 16 step inside the span)
//   [16, 30) leading-dimension byte offset >> 4: unused for swizzled K-major layouts (one MMA's 32 bytes of K lie
//            inside one swizzle span); 1, as CuTe writes it
//   [32, 46) stride-dimension byte offset >> 4: from one 8-row group to the next along M / N = 8 x 128 B = 1024 B
//   [46, 48) version: 1 on sm_100 (the descriptor format of tcgen05; sm_90's wgmma descriptors have 0 here)
//   [49, 52) base offset: 0, since every stage starts 1024-byte aligned, so the swizzle pattern starts at row 0 of
//            its 8-row phase (the +32 B steps along K keep it: the hardware swizzles by address bits [4, 7) ^ [7, 10))
//   [52]     LBO mode: 0 (byte offsets, not the absolute mode)
//   [61, 64) layout: 2 = SWIZZLE_128B in tcgen05's encoding (0 none, 1 128B with 32B atoms, 4 64B, 6 32B)
constexpr uint64_t kDescSW128 = (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 46) |
                                (uint64_t(2) << 61);
__host__ __device__ constexpr uint64_t sw128_desc(uint32_t smem_addr) {
  return kDescSW128 | ((smem_addr >> 4) & 0x3FFF);
}

// Instruction descriptor of kind::f16 (PTX ISA "Instruction descriptor"), 32 bits:
//   [0, 2) sparsity selector 0, [2] dense 0, [3] saturate 0 (integer MMAs only)
//   [4, 6)   D format: 1 = fp32 accumulator
//   [7, 10)  A format: 1 = bf16;   [10, 13) B format: 1 = bf16
//   [13] [14] negate A, B: 0
//   [15] [16] A, B major: 0 = K-major (both tiles are rows of K, as TMA writes them)
//   [17, 23) N >> 3;   [24, 29) M >> 4 (bit 23 is reserved);   [30, 32) max shift 0 (.ws only)
__host__ __device__ constexpr uint32_t instr_desc_bf16_f32(int m, int n) {
  return (1u << 4) | (1u << 7) | (1u << 10) | (uint32_t(n >> 3) << 17) | (uint32_t(m >> 4) << 24);
}
constexpr uint32_t kInstrDesc = instr_desc_bf16_f32(kTileM, kTileN);

// D[tmem] = A . B^T (+ D where `accumulate`): one tensor-core MMA of 128 x N x 16, issued by this thread alone and
// completing asynchronously (tcgen05.commit tells an mbarrier when).
__device__ __forceinline__ void umma_bf16(uint32_t d_tmem, uint64_t a_desc, uint64_t b_desc, bool accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %4, 0;\n"
      " tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, p;\n}"
      ::"r"(d_tmem), "l"(a_desc), "l"(b_desc), "r"(kInstrDesc), "r"(static_cast<uint32_t>(accumulate)) : "memory");
}
// One arrival on mbarrier `bar` once every tcgen05.mma this thread issued before it has completed (its smem reads
// and TMEM writes done). A CTA's own shared address is valid in the shared::cluster window.
__device__ __forceinline__ void umma_commit(uint32_t bar) {
  asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];" ::"r"(bar) : "memory");
}
// One lane of the (converged) warp: true in that lane only.
__device__ __forceinline__ bool elect_one() {
  uint32_t elected;
  asm volatile("{\n .reg .pred p;\n elect.sync _|p, 0xffffffff;\n selp.u32 %0, 1, 0, p;\n}" : "=r"(elected));
  return elected != 0;
}
// Orders the tcgen05 operations after it behind the thread synchronization before it (an mbarrier wait).
__device__ __forceinline__ void tcgen05_after_sync() { asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory"); }
}  // namespace

extern "C" __device__ void umma_mainloop_load(pl_ctx ctx, pl_bind_umma_mainloop b) {
  if (ctx.thread != 0) return;  // one thread issues every copy
  if (ctx.iter == 0) {
    pl_tma_prefetch_map(b.a);
    pl_tma_prefetch_map(b.b);
  }
  const uint32_t ring_a = pl_smem_addr(ctx.smem + b.a_ring);
  const uint32_t ring_b = pl_smem_addr(ctx.smem + b.b_ring);
  // The k-tiles of this call, [k_begin, k_end): the glue's schedule ([schedule] k_tiles in the contract).
  for (int k = ctx.k_begin; k < ctx.k_end; ++k) {
    const int n = ctx.stage_base + (k - ctx.k_begin);  // position in this block's stream of stages
    const int stage = n % b.stages;
    // A fresh mbarrier counts as having completed the phase before phase 0: waiting on the opposite parity lets the
    // first pass over the ring through.
    pl_mbar_wait(pl_mbar(ctx, b.empty, stage), ((n / b.stages) & 1) ^ 1);
    const uint32_t full = pl_mbar(ctx, b.full, stage);
    pl_mbar_arrive_expect_tx(full, kStageBytesA + kStageBytesB);
    pl_tma_load_2d(ring_a + stage * kStageBytesA, b.a, k * kTileK, ctx.tile_row * kTileM, full);
    pl_tma_load_2d(ring_b + stage * kStageBytesB, b.b, k * kTileK, ctx.tile_col * kTileN, full);
  }
}

// The whole warp runs the loop (and waits on the mbarriers); one lane, elected once per call, issues every MMA and
// commit of the tile: a commit tracks the MMAs of the thread that issues it, so the one on acc_full must come from the
// thread that issued the tile's MMAs. (Electing inside a warp-wide loop, rather than returning in lanes 1..31, keeps
// the descriptors warp-uniform: ptxas builds them in uniform registers and issues the 4 UTCHMMA back to back, where a
// one-thread branch wraps each in an ELECT / R2UR.BROADCAST loop.)
extern "C" __device__ void umma_mainloop_mma(pl_ctx ctx, pl_bind_umma_mainloop b) {
  const bool leader = elect_one();
  const int slot = ctx.iter & 1;
  const uint32_t d_tmem = b.accum + slot * kTileN;  // the column field is the low 16 bits; lane 0
  // Slot use u = iter / 2 needs the epilogue's release of use u - 1; a fresh barrier lets use 0 through.
  pl_mbar_wait(pl_mbar(ctx, b.acc_empty, slot), ((ctx.iter >> 1) & 1) ^ 1);
  tcgen05_after_sync();  // our MMAs' TMEM writes come after the epilogue's tcgen05.ld of the slot
  const uint32_t ring_a = pl_smem_addr(ctx.smem + b.a_ring);
  const uint32_t ring_b = pl_smem_addr(ctx.smem + b.b_ring);
  for (int k = ctx.k_begin; k < ctx.k_end; ++k) {
    const int n = ctx.stage_base + (k - ctx.k_begin);
    const int stage = n % b.stages;
    pl_mbar_wait(pl_mbar(ctx, b.full, stage), (n / b.stages) & 1);
    tcgen05_after_sync();
    if (leader) {
      const uint64_t a_desc = sw128_desc(ring_a + stage * kStageBytesA);
      const uint64_t b_desc = sw128_desc(ring_b + stage * kStageBytesB);
#pragma unroll
      for (int kk = 0; kk < kTileK / kMmaK; ++kk) {
        // K step kk starts kk * 32 bytes into each 128-byte row: + 2 in the descriptor's 16-byte address units.
        // The first k-tile of the call overwrites the slot (it holds the sums of the tile before last).
        umma_bf16(d_tmem, a_desc + 2 * kk, b_desc + 2 * kk, k > ctx.k_begin || kk > 0);
      }
      umma_commit(pl_mbar(ctx, b.empty, stage));  // the stage goes back to the producer once these MMAs have read it
    }
    __syncwarp();
  }
  // The tile's sums are complete once all of the above are: the epilogue may read the slot.
  if (leader) umma_commit(pl_mbar(ctx, b.acc_full, slot));
  __syncwarp();
}

// llama_gemv.cuh: the skinny GEMM both projections of the decode block run (llama_qkv_rope,
// llama_oproj_residual): out[r][n] = sum_k act[r][k] * weight[n][k] for the B <= 64 rows of the
// activation and every weight row n, one 64-row group of weights (a head, or 64 output columns)
// at a time, handed to the component's epilogue complete.
//
// Decode is bound by the weight read (12 + 8 MB at 4.3 TB/s: ~3 + 2 us), so the work is split to
// keep every SM streaming: an iteration is one group's 256-column chunk (64 weight rows x 512 B),
// the iterations of all groups are laid end to end (group major) and block b takes the contiguous
// range [b U / G, (b + 1) U / G) of the U of them (stream-K: 384 iterations over 132 blocks for the
// 48 qkv heads, 256 for o-proj's 32 groups; no block does more than one iteration above the
// average). Each iteration's weights (a unit's rows of a 256-column chunk: two TMA boxes, one a band
// of rows, 8 to 32 KB) go into a ring of 128 KB, issued by thread 0 ahead of the consumers: all of a
// block's weight bytes are in flight at once. One copy per 32 KB matters: 512-byte bulk copies (one per
// row) cost ~80 ns each on the H200, serialized per SM (bench/NOTES.md, llama_phases), 5x the
// HBM time of their bytes.
//
// The chunk's columns are cut into 4 or 8 warp slices (the fact gemv_slices, run_sliced). With 4,
// warp w reads columns 64 (w % 4) .. + 63 of the chunk for weight rows 32 (w / 4) .. + 31; with 8,
// columns 32 w .. + 31 for all 64 weight rows. Per 32-column step, lane (g, q) loads columns
// 8q..8q+7 of weight row g of each 8-row tile (from the stage) and of activation rows g and g + 8 of
// each 16-row tile (from global memory, straight into registers, one iteration ahead: the next chunk's
// loads are issued before this chunk's wait for its weights; with 4 slices each activation element is
// read by two warps, 2 x B x 4 KB per group, with 8 by one; at B <= 8 the fact gemv_act_smem stages the
// whole activation in smem first and the fragments are shared loads), and feeds them to two m16n8k16 mma.sync
// (bf16 in, fp32 sums; a sum does not care in which order its k come, as long as both operands use
// the same one). Activation rows >= B are zeros. At the end of a group each column slice stores its
// sums in its own quarter of `out` (with 8 slices, slices 4..7 then add theirs onto slices 0..3's)
// and one pass adds the four in slice order into the first.
//
// A group split across blocks (its first or last iteration in another block's range) is summed
// deterministically: each contributing block stores its fp32 partial [B][64] in its own slot of
// the `partials` workspace and adds its iteration count to the group's counter (`counts`, back
// at 0 after every launch: the completing block resets it); the block that completes the count sums the contributors' slots in block order
// (the same order whoever finishes) and runs the epilogue. fp32 accumulation order: within a warp,
// k ascending over its columns of each chunk in 32-column steps (each mma's k order as above), then
// the four warps' column slices in order (with 8 slices, s_j + s_(j+4) for each of the four first), then
// the blocks in order.
//
// That is the mma.sync core (run_sliced). The fact gemv_core = 1 picks the wgmma core (run_wgmma) for parts of 32 or
// 16 rows: each ring stage holds the chunk's weights as four 128-byte-swizzled slabs of 64 columns and the chunk's
// activation (64 rows, zero past the batch) as four more, and the block's two warpgroups multiply a half of the chunk
// each with wgmma, both operands read from smem, no fragment in registers; its two sums meet in `out` like the slices'.
// In clusters of two it reads each activation chunk from L2 once a cluster: each block copies half and hands it to its
// peer's smem.
//
// Every thread of the block calls run(); the epilogue gets the group and `out`, fp32 [64][64]
// (rows < B valid; element (r, c) at out_at(r, c)), and runs in every thread; run() syncs the block around it.
// No include guard: the monolithic control compiles each component's source in a namespace of its
// own, and both projections' copies of this header must be seen there (a guard would hide one).

#include <cuda_bf16.h>

#include <type_traits>

namespace llama_gemv {
constexpr int kRows = 64;              // weight rows per group
constexpr int kChunk = 256;            // columns per iteration (the TMA box: [64, 256])
constexpr int kRingBytes = 4 * kRows * kChunk * 2;  // the ring's smem: 128 KB
constexpr int kActPad = 64;            // bytes between the staged activation's rows (gemv_act_smem): no bank conflicts
constexpr int kActLoads = 8;           // 16-byte loads a thread stages at once: 8 rows of 2048 bf16 over 256 threads
constexpr int kWarps = 8;              // the consumers (the `empty` arrivals); blocks of 256 threads
constexpr int kMaxBlocks = 160;        // the `partials` workspace's room: two slots per block
constexpr int kSlab = 64;              // the wgmma core's slab: 64 columns, one 128-byte-swizzled row of bf16
constexpr int kSlabs = kChunk / kSlab; // slabs a chunk: 4, two for each of the block's two warpgroups
constexpr int kActRows = 64;           // the wgmma core's activation rows (its M): the batch, rows past it zero

struct Buffers {
  unsigned char* smem;  // ctx.smem
  unsigned ring;        // byte offset of the ring: `stages` stages of [part_rows][256] bf16 (at most kRingBytes)
  unsigned out;         // byte offset of fp32 [4][64][64]: the column slices' sums, their total in the first
  unsigned full, empty; // mbarrier arrays, `stages` each
  float* partials;      // workspace: [kMaxBlocks][2][B][64] fp32
  unsigned* counts;     // workspace: one counter per group, reset by the block that completes it
  int split;            // the fact gemv_split: blocks per 64-row group (block_first): 1 whole groups .. 8 stream-K
  int slices;           // the fact gemv_slices: the chunk's columns in 4 or 8 warp slices (run_sliced)
  int part_rows;        // the fact gemv_rows: weight rows of a unit (64 the whole group, 32 or 16 a part: units)
  // The fact gemv_stages: iterations the ring holds, a stage each (part_rows x 256 bf16): 4 of whole groups fill its
  // 128 KB, as do 8 of 32-row parts or 16 of 16-row ones (the contracts' limit: stages x part_rows <= 256). With the
  // ring full a block at B = 1 has its whole unit (128 or 64 KB) in flight at once, and o-proj's preload() copies all
  // of it before its grid barrier.
  int stages;
  // The fact gemv_act_smem: 1 stages the whole activation (rows <= 8, the contracts' limit) in smem at `act` before
  // the first iteration, rows 2 x depth + kActPad bytes apart, and each iteration's fragments are shared loads. With
  // registers only (0) each iteration's fragments are loaded one iteration ahead from L2; at B <= 8 an iteration is
  // far shorter than that round trip, so every iteration waited for one: ~8 round trips a projection.
  int act_smem;
  unsigned act;         // byte offset of the staged activation (act_smem)
  bool act_written;     // the activation is written earlier in the same launch (o-proj's): loaded through L2
  // The fact gemv_core: 0 the mma.sync core (run_sliced: the activation from L2 or `act` into registers, the weights
  // from the ring by shared loads), 1 the wgmma core (run_wgmma: each ring stage holds the weights as 128-byte-swizzled
  // slabs and the chunk's activation beside them, both read by wgmma from smem; parts of 32 or 16 rows, B <= 64).
  int core;
  // The fact cluster_ctas (the link's [launch] cluster; the wgmma core only): 2 has the two blocks of a cluster project units over the
  // same chunks in step, each copying half of every activation chunk from global memory and handing it to its peer
  // (a bulk copy between the two blocks' smem), so the activation is read from L2 once a cluster, not once a block.
  int share;
  unsigned half;        // mbarrier array (share = 2): a stage's own half of the activation has landed (256 arrivals)
};

// Bytes of one ring stage: the unit's chunk of weights (part_rows x 256 bf16), and with the wgmma core the chunk's
// activation after it (64 rows x 256 bf16).
__device__ __forceinline__ int stage_bytes(const Buffers& s) {
  return (s.part_rows + (s.core ? kActRows : 0)) * kChunk * 2;
}

// A unit of work is `part_rows` weight rows of a group (all 64, or a part of 32 or 16): units u = group * parts + part,
// parts = 64 / part_rows. A part holds two bands of part_rows / 2 rows, lo .. lo + part_rows / 2 - 1 and 32 + lo ..,
// lo = part * part_rows / 2, so each pair of rows (i, i + 32) lies in one part (RoPE's rotate_half pairs). Cutting
// groups into parts spreads a projection over more blocks (48 heads x 2 = 96 units) with no cross-block sum: each part
// is a whole output column set of its own, where gemv_split's blocks meet in `partials`.
// Weight row of the first row of band `band` (0 or 1) of unit u.
__device__ __forceinline__ int band_row(int unit, int parts, int band) {
  return (unit / parts) * kRows + band * (kRows / 2) + (unit % parts) * (kRows / 2 / parts);
}

// The group's column (weight row within the group) of row j of a unit whose bands start at lo and 32 + lo and
// are `width` rows each: the first band's rows, then the second's.
__device__ __forceinline__ int band_col(int lo, int width, int j) {
  return j < width ? lo + j : kRows / 2 + lo + j - width;
}

// Copies iteration `it`'s weights (both bands of its unit) to the stage at `dst`, completing the mbarrier `bar`. The
// mma.sync core's stage holds band 0's rows, then band 1's: two TMA boxes of [part_rows / 2, 256]. The wgmma core's
// (`slabs`) holds 4 slabs of 64 columns, each [part_rows][64] (band 0's rows, then band 1's), 128-byte swizzled as wgmma
// reads a K-major operand: eight boxes of [part_rows / 2, 64] (the tensor map's box and swizzle follow the fact).
__device__ __forceinline__ void copy_chunk(uint32_t dst, const pl_tensor_map* weight, int it, int per_group, int parts,
                                           uint32_t bar, bool slabs) {
  const int unit = it / per_group, col = (it % per_group) * kChunk, band_rows = kRows / 2 / parts;
  if (!slabs) {
    pl_tma_load_2d(dst, weight, col, band_row(unit, parts, 0), bar);
    pl_tma_load_2d(dst + band_rows * kChunk * 2, weight, col, band_row(unit, parts, 1), bar);
    return;
  }
#pragma unroll
  for (int slab = 0; slab < kSlabs; ++slab)
#pragma unroll
    for (int band = 0; band < 2; ++band)
      pl_tma_load_2d(dst + (2 * slab + band) * band_rows * kSlab * 2, weight, col + slab * kSlab,
                     band_row(unit, parts, band), bar);
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                         unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Slot `slot` of the mbarrier array at byte offset `off` (component.h's pl_mbar without the ctx).
__device__ __forceinline__ uint32_t mbar(const Buffers& s, unsigned off, int slot) {
  return pl_smem_addr(s.smem + off + 8 * slot);
}

// Where (row r, column c) of a [64][64] fp32 sum buffer (`out`, its slice copies, `partials`) lies: the 8-float
// column blocks XOR-ed by the row's low 3 bits, so the accumulators' float2 stores (lanes g = 0..7 on 8 rows, one
// column block) land in 8 different bank groups instead of one (8-way conflicts, bench/NOTES.md, sixteenth
// session). Groups of 4 floats stay whole and in place within their block, so float4 passes over the buffers
// (the slice sum, the partials) are unchanged; only reads by (row, column) go through out_at.
__device__ __forceinline__ int out_at(int r, int c) { return r * 64 + (c ^ ((r & 7) << 3)); }

// First of `total` items of part `blk` when they are cut into `parts` near-equal contiguous ranges (the grid's blocks
// by default; its range ends where part blk + 1's starts).
__device__ __forceinline__ int range_start(int blk, int total, unsigned parts = gridDim.x) {
  return static_cast<int>(static_cast<unsigned>(blk * total) / parts);  // 32-bit: a 64-bit division is a call
}

// First iteration of block `blk` under the spread `split` (which divides per_group): each group is cut into
// `split` units of per_group / split iterations, and block blk takes units [blk U / grid, (blk + 1) U / grid) of
// the U = groups x split of them. split = per_group is stream-K over single iterations (range_start above);
// split = 1 gives whole groups only (with groups <= grid, one or none a block), so nothing meets in `partials`
// and fewer blocks stream, each a whole group's weights; 2 and 4 lie between: a group over 2 or 4 blocks.
// With share = 2 (cluster_ctas; split 1) the grid's clusters of two blocks take pairs of units instead: cluster c the
// pairs [p0, p1) = its range of the groups / 2 pairs, rank 0 the first p1 - p0 of its 2 (p1 - p0) units and rank 1 the
// rest, so both blocks of a cluster run as many units, chunk for chunk over the same columns.
__device__ __forceinline__ int block_first(int blk, int groups, int per_group, int split, int share = 1) {
  if (share == 2) {
    const unsigned clusters = gridDim.x / 2;
    const int p0 = range_start(blk / 2, groups / 2, clusters), p1 = range_start(blk / 2 + 1, groups / 2, clusters);
    return (2 * p0 + blk % 2 * (p1 - p0)) * per_group;
  }
  return range_start(blk, groups * split) * (per_group / split);
}

// The slot block `blk` keeps its partial of `group` in: 0 for its first group, 1 for its last (a block's range
// meets at most two groups: it is at most per_group + 1 iterations long at every spread with 132 blocks).
__device__ __forceinline__ int slot_of(int blk, int group, int groups, int per_group, int split) {
  return block_first(blk, groups, per_group, split) / per_group == group ? 0 : 1;
}

// 16 bytes of the activation: through the read-only path for an input of the kernel (x), through L2 (ld.global.cg)
// for one written earlier in the same launch by other blocks (the attention's output), which the read-only path may
// not be used for.
__device__ __forceinline__ uint4 act_read(const Buffers& s, const uint4* at) {
  return s.act_written ? __ldcg(at) : __ldg(at);
}

// 16 bytes of activation row r from column c, zeros for rows past the batch.
__device__ __forceinline__ uint4 act_load(const Buffers& s, const __nv_bfloat16* act, int r, int rows, int depth, int c) {
  return r < rows ? act_read(s, reinterpret_cast<const uint4*>(act + static_cast<size_t>(r) * depth + c)) : make_uint4(0, 0, 0, 0);
}

// Stores 16-byte piece i of the activation (row-major, depth bf16 a row) into its staged copy.
__device__ __forceinline__ void stage_act(unsigned char* staged, int depth, int i, uint4 piece) {
  const int per_row = depth / 8;
  *(reinterpret_cast<uint4*>(staged + (i / per_row) * (2 * depth + kActPad)) + i % per_row) = piece;
}

// 16 bytes of row r of the staged activation from column c, zeros for rows past the batch. Those read row 0 and drop
// it: the buffer holds the batch's rows only, and an address past it, even under a predicate that is never true, is
// what the conformance check refuses (its constant part lies past the buffer).
__device__ __forceinline__ uint4 act_load_staged(const unsigned char* staged, int r, int rows, int depth, int c) {
  const uint4 v = *reinterpret_cast<const uint4*>(staged + (r < rows ? r : 0) * (2 * depth + kActPad) + 2 * c);
  return r < rows ? v : make_uint4(0, 0, 0, 0);
}

// Thread 0: iteration `it`'s weights into ring stage `st` (free), the stage's `full` expecting their bytes.
__device__ __forceinline__ void copy_weights(const Buffers& s, const pl_tensor_map* weight, int it, int st, int per_group,
                                             int parts) {
  // (with share = 2 the stage also gets the peer's half of the activation: kActRows x 128 bf16, its bytes counted here)
  pl_mbar_arrive_expect_tx(mbar(s, s.full, st), s.part_rows * kChunk * 2 + (s.share == 2 ? kActRows * kChunk : 0));
  copy_chunk(pl_smem_addr(s.smem + s.ring + st * stage_bytes(s)), weight, it, per_group, parts, mbar(s, s.full, st),
             s.core != 0);
}

// Thread 0: copies iterations issued .. into the ring while fewer than s.stages of them are ahead of iteration it
// (each stage freed by its `empty` phase first); returns the next iteration to copy.
__device__ __forceinline__ int fill_ring(const Buffers& s, const pl_tensor_map* weight, int first, int end, int issued,
                                         int it, int per_group, int parts) {
#pragma unroll 1  // up to 16 stages at once (preload): a loop, not 16 copies of its body
  for (; issued < end && issued < it + s.stages; ++issued) {
    const int m = issued - first, st = m % s.stages;
    pl_mbar_wait(mbar(s, s.empty, st), ((m / s.stages) & 1) ^ 1);
    copy_weights(s, weight, issued, st, per_group, parts);
  }
  return issued;
}

// This block's iterations [first, end) of the projection's units (groups x parts of per_group iterations each).
struct Units {
  int per_group, parts, first, end;
};
__device__ __forceinline__ Units block_units(const Buffers& s, int depth, int groups) {
  const int per_group = depth / kChunk, parts = kRows / s.part_rows, units = groups * parts;
  return {per_group, parts, block_first(blockIdx.x, units, per_group, s.split, s.share),
          block_first(blockIdx.x + 1, units, per_group, s.split, s.share)};
}

// Asks L2 for the weight boxes this block's run() will copy, past the first `skip` (those preload() copied; a few TMA
// prefetches, from one thread): o-proj calls it before its grid barrier, so its 8 MB can stream from HBM while the
// attention finishes. Measured under stream-K at L = 16: no change (o-proj there is not waiting on HBM; bench/NOTES.md,
// "Third session on the H200").
__device__ __forceinline__ void prefetch(const Buffers& s, const pl_tensor_map* weight, int depth, int groups, int skip) {
  const Units u = block_units(s, depth, groups);
  const int boxes = s.core ? kSlabs : 1, box = kChunk / boxes;  // the tensor map's box: [., 256] or a slab's [., 64]
  for (int it = u.first + skip; it < u.end; ++it)
    for (int b = 0; b < boxes; ++b)
      for (int band = 0; band < 2; ++band)
        pl_tma_prefetch_2d(weight, (it % u.per_group) * kChunk + b * box, band_row(it / u.per_group, u.parts, band));
}

// Thread 0 only: copies this block's first weight chunks (up to the ring's stages) into the ring now, before run(), and returns
// how many (run()'s `preloaded`). O-proj calls it before its grid barrier: its weights do not depend on the attention,
// and this block's own attention is done by then, so its ring may fill while the other blocks finish theirs (the
// ring's smem is live in o-proj's phase only; nothing else of this block touches it after the attention returns).
__device__ __forceinline__ int preload(const Buffers& s, const pl_tensor_map* weight, int depth, int groups) {
  const Units u = block_units(s, depth, groups);
  pl_fence_proxy_async();  // the ring's smem may have been the attention's: its generic accesses before these copies
  return fill_ring(s, weight, u.first, u.end, u.first, u.first, u.per_group, u.parts) - u.first;  // fresh stages: the `empty` waits return at once
}

// The end of unit `group` in this block, once each core's sums of it are in the first kSums [64][64] slices of `out`
// (written, not yet synced): their sum in slice order into the first; if other blocks share the unit (gemv_split > 1),
// this block's partial and its count, and, in the block that completes the count, every contributor's partial summed
// in block order; then the epilogue on the unit's columns (lo .. lo + kBand - 1 and 32 + lo ..) and a block barrier.
// Blocks that do not complete a shared unit return without the epilogue. kLoadsAtOnce: contributors' partials loaded
// at once (kParts, as the mma.sync core has passed since parts came in, 0abf45a: its constant of 8 was shadowed by
// the template's kParts there; 8 again is a change to measure, bench/NOTES.md, eighteenth session).
template <int kSums, int kParts, int kLoadsAtOnce, class Epilogue>
__device__ __forceinline__ void finish_unit(int thread, const Buffers& s, int rows, int group, int groups, int first,
                                            int end, int per_group, Epilogue epilogue) {
  constexpr int kBand = kRows / kParts / 2;
  float* out = reinterpret_cast<float*>(s.smem + s.out);
  const int total = groups * per_group, g_first = group * per_group, g_end = g_first + per_group;
  const int lo = (group % kParts) * kBand;
  const auto first_of = [&](int blk) { return block_first(blk, groups, per_group, s.split, s.share); };
  __syncthreads();
  for (int i = thread; i < rows * 16; i += blockDim.x) {  // float4 i of the rows < B
    const float4* slices = reinterpret_cast<const float4*>(out);
    float4 sum = slices[i];
#pragma unroll
    for (int sl = 1; sl < kSums; ++sl) {
      const float4 v = slices[sl * kRows * 16 + i];
      sum.x += v.x;
      sum.y += v.y;
      sum.z += v.z;
      sum.w += v.w;
    }
    reinterpret_cast<float4*>(out)[i] = sum;
  }
  __syncthreads();
  if (first > g_first || end < g_end) {  // shared with other blocks: the partial, then the count
    float4* mine = reinterpret_cast<float4*>(
        s.partials + ((static_cast<size_t>(blockIdx.x) * 2 + slot_of(blockIdx.x, group, groups, per_group, s.split)) *
                      rows) * 64);
    for (int i = thread; i < rows * 16; i += blockDim.x) mine[i] = reinterpret_cast<const float4*>(out)[i];
    // CUTLASS's semaphore pattern: the block barrier orders every thread's stores before thread 0's
    // release, and its acquire before every thread's reads after the next barrier (no fence per thread).
    __syncthreads();
    bool last = false;  // whether this block completes the group's count
    if (thread == 0) {
      const unsigned done = min(end, g_end) - max(first, g_first);
      unsigned before;
      asm volatile("atom.add.acq_rel.gpu.global.u32 %0, [%1], %2;"
                   : "=r"(before) : "l"(s.counts + group), "r"(done) : "memory");
      last = before + done == static_cast<unsigned>(per_group);
      // Every contribution has counted and nobody touches the count again this launch: 0 for the next one
      // (the workspace is `zero_once`: cleared before the first launch only, no memset before each).
      if (last) s.counts[group] = 0;
    }
    if (!__syncthreads_or(last)) return;
    // Sum the contributors' partials in block order: the blocks whose ranges meet the group, b0 .. b1 - 1
    // (each with at least one of the group's per_group iterations: at most per_group of them), found from a
    // first guess (exact for stream-K) by the blocks' ranges.
    int b0 = static_cast<int>(g_first * gridDim.x / static_cast<unsigned>(total));
    while (b0 > 0 && first_of(b0) > g_first) --b0;
    while (first_of(b0 + 1) <= g_first) ++b0;
    int b1 = b0;
    while (b1 < static_cast<int>(gridDim.x) && first_of(b1) < g_end) ++b1;
    // kLoadsAtOnce contributors at a time, every load issued before the first add: one L2 round trip per kLoadsAtOnce
    // blocks, not one per block. The adds stay in block order (out carries the sum from one batch to the next).
    float4* sums = reinterpret_cast<float4*>(out);
    for (int c0 = b0; c0 < b1; c0 += kLoadsAtOnce) {
      const float4* from[kLoadsAtOnce];  // contributor c0 + c's partial, or null (past b1, or no iterations)
#pragma unroll
      for (int c = 0; c < kLoadsAtOnce; ++c) {
        const int blk = c0 + c;
        from[c] = blk < b1 && first_of(blk) != first_of(blk + 1)
                      ? reinterpret_cast<const float4*>(
                            s.partials + ((static_cast<size_t>(blk) * 2 + slot_of(blk, group, groups, per_group,
                                                                                   s.split)) * rows) * 64)
                      : nullptr;
      }
      for (int i = thread; i < rows * 16; i += blockDim.x) {
        float4 part[kLoadsAtOnce];
#pragma unroll
        for (int c = 0; c < kLoadsAtOnce; ++c) part[c] = from[c] ? __ldcg(from[c] + i) : make_float4(0.f, 0.f, 0.f, 0.f);
        float4 sum = c0 == b0 ? make_float4(0.f, 0.f, 0.f, 0.f) : sums[i];
#pragma unroll
        for (int c = 0; c < kLoadsAtOnce; ++c) {
          if (!from[c]) continue;
          sum.x += part[c].x;
          sum.y += part[c].y;
          sum.z += part[c].z;
          sum.w += part[c].w;
        }
        sums[i] = sum;
      }
    }
    __syncthreads();
  }
  epilogue(group / kParts, lo, kBand, out);  // its columns: lo .. lo + kBand - 1 and 32 + lo ..
  __syncthreads();  // out is free for the next group
}

// The projection with the chunk's columns cut into kSlices warp slices (the fact gemv_slices): 4 slices of 64
// columns, each read by two warps (weight rows 0..31 and 32..63), or 8 slices of 32 columns, each warp all 64 weight
// rows. With 8, each activation element is read by one warp of the block instead of two (B x 4 KB a group instead of
// 2 x B x 4 KB: at B = 64, 256 KB against the group's 256 KB of weights, where 4 slices read 512 KB), at twice the
// accumulators (128 registers at B = 64) and one more block barrier a group (the eight slices' sums meet in four).
// kParts: units a group is cut into (the fact gemv_rows, 64 / kParts rows a unit; band_row above). Below, a "group" of
// the stream-K bookkeeping (ranges, counts, partials) is a unit.
template <int kSlices, int kParts, class Epilogue>
__device__ __forceinline__ void run_sliced(int thread, const Buffers& s, const __nv_bfloat16* act,
                                           const pl_tensor_map* weight, int rows, int depth, int head_groups,
                                           int preloaded, Epilogue epilogue) {
  static_assert(kSlices == 4 || kSlices == 8, "4 or 8 column slices");
  static_assert(kParts == 1 || kParts == 2 || kParts == 4, "a unit of 64, 32 or 16 weight rows");
  constexpr int kHalves = kWarps / kSlices;       // warps that share a slice: 2 or 1
  constexpr int kCols = kChunk / kSlices;         // a warp's columns of a chunk: 64 or 32
  constexpr int kSteps = kCols / 32;              // its 32-column steps: 2 or 1
  constexpr int kPartRows = kRows / kParts;       // the unit's weight rows: 64, 32 or 16, in two bands
  constexpr int kBand = kPartRows / 2;
  constexpr int kWarpRows = kPartRows / kHalves;  // the warp's weight rows: 8 .. 64
  constexpr int kNTiles = kWarpRows / 8;          // its 8-row n-tiles: 1 .. 8
  constexpr int kStageBytes = kPartRows * kChunk * 2;
  const int stages = s.stages;  // a link-time constant: the stage arithmetic below folds
  const int warp = thread / 32, lane = thread % 32, g = lane / 4, q = lane % 4;
  const int slice = warp % kSlices, half = warp / kSlices;  // columns kCols slice .., weight rows kWarpRows half ..
  const int groups = head_groups * kParts;  // units, from here on called groups
  const int per_group = depth / kChunk;
  const int first = block_first(blockIdx.x, groups, per_group, s.split),
            end = block_first(blockIdx.x + 1, groups, per_group, s.split);
  const int m_tiles = (rows + 15) / 16;
  unsigned char* ring = s.smem + s.ring;
  float* out = reinterpret_cast<float*>(s.smem + s.out);
  unsigned char* staged = s.smem + s.act;

  // This warp's activation fragments for iteration `it`: kSteps steps of 32 columns, rows g and g + 8 of each tile.
  const auto load_act = [&](int it, uint4 (&xa)[kSteps][4][2]) {
    const int col = (it % per_group) * kChunk + slice * kCols + 8 * q;
#pragma unroll
    for (int step = 0; step < kSteps; ++step)
#pragma unroll
      for (int mt = 0; mt < 4; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = mt * 16 + g + 8 * h, c = col + 32 * step;
          xa[step][mt][h] = mt >= m_tiles ? make_uint4(0, 0, 0, 0)
                            : s.act_smem ? act_load_staged(staged, r, rows, depth, c) : act_load(s, act, r, rows, depth, c);
        }
  };

  int issued = first + preloaded;  // thread 0's next iteration to copy (preload() copied the first `preloaded`)
  if (thread == 0) issued = fill_ring(s, weight, first, end, issued, first, per_group, kParts);  // the first stages
  if (s.act_smem && first < end) {
    // The whole activation into smem (its loads in flight with the weight copies just issued). Past kActLoads a
    // thread (more than 8 rows; the contracts refuse that) the rest is copied one load at a time.
    const int per_row = depth / 8, total = rows * per_row;  // 16-byte pieces
    const uint4* from = reinterpret_cast<const uint4*>(act);
    uint4 piece[kActLoads];
#pragma unroll
    for (int k = 0; k < kActLoads; ++k)
      if (thread + k * kWarps * 32 < total) piece[k] = act_read(s, from + thread + k * kWarps * 32);
#pragma unroll
    for (int k = 0; k < kActLoads; ++k)
      if (thread + k * kWarps * 32 < total) stage_act(staged, depth, thread + k * kWarps * 32, piece[k]);
    for (int i = thread + kActLoads * kWarps * 32; i < total; i += kWarps * 32) stage_act(staged, depth, i, act_read(s, from + i));
    __syncthreads();
  }
  float acc[4][kNTiles][4] = {};  // [m-tile][n-tile][fragment]
  uint4 xa[kSteps][4][2];         // the activation fragments of the iteration at hand
  if (first < end) load_act(first, xa);
  for (int it = first; it < end; ++it) {
    const int n = it - first, stage = n % stages;
    if (thread == 0) issued = fill_ring(s, weight, first, end, issued, it, per_group, kParts);
    // The next iteration's activation, loaded one iteration ahead: its L2 round trip runs under this iteration's
    // mma instead of before the next one's (loaded at the top of each iteration, every chunk waited on it: the
    // weights were already in the ring by then; bench/NOTES.md, fifteenth session).
    uint4 xn[kSteps][4][2];
    if (it + 1 < end) load_act(it + 1, xn);
    pl_mbar_wait(mbar(s, s.full, stage), (n / stages) & 1);
    const __nv_bfloat16* w = reinterpret_cast<const __nv_bfloat16*>(ring + stage * kStageBytes) +
                             (half * kWarpRows + g) * kChunk + slice * kCols + 8 * q;
#pragma unroll
    for (int step = 0; step < kSteps; ++step) {
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        const uint4 wv = *reinterpret_cast<const uint4*>(w + nt * 8 * kChunk + 32 * step);
#pragma unroll
        for (int mt = 0; mt < 4; ++mt) {
          if (mt < m_tiles) {
            const uint4 lo = xa[step][mt][0], hi = xa[step][mt][1];
            mma_bf16(acc[mt][nt], lo.x, hi.x, lo.y, hi.y, wv.x, wv.y);
            mma_bf16(acc[mt][nt], lo.z, hi.z, lo.w, hi.w, wv.z, wv.w);
          }
        }
      }
    }
    __syncwarp();
    if (lane == 0) pl_mbar_arrive(mbar(s, s.empty, stage));
    if (it + 1 < end) {
#pragma unroll
      for (int step = 0; step < kSteps; ++step)
#pragma unroll
        for (int mt = 0; mt < 4; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h) xa[step][mt][h] = xn[step][mt][h];
    }

    const int group = it / per_group;
    if (it + 1 != end && it + 1 != (group + 1) * per_group) continue;  // the group goes on in this block
    // The block's share of the group: each column slice's sums into a [64][64] of its own (no barrier between
    // the slices; four rounds on one buffer were 15 % of qkv's warp samples at B = 64, bench/NOTES.md), then
    // summed in slice order into slice 0, which is `out`: ((s0 + s1) + s2) + s3, the order the rounds took.
    // With 8 slices, slices 4..7 then add theirs onto slices 0..3's (buffer j holds s_j + s_(j+4)) before that sum.
    // C fragment: rows g, g + 8 of each m-tile, columns 2q, 2q + 1 of each n-tile.
    // The unit's stage row j is the group's column band_col(lo, kBand, j) (bands: band_row).
    const int lo = (group % kParts) * kBand;
    const auto keep = [&](bool add) {
      float* mine = out + (slice % 4) * kRows * 64;
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) {
        if (mt < m_tiles) {
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {  // rows g and g + 8
              const int j = half * kWarpRows + nt * 8;  // + 2q: an 8-row tile never crosses a band (kBand % 8 == 0)
              float2* at = reinterpret_cast<float2*>(
                  mine + out_at(mt * 16 + g + 8 * h, band_col(lo, kBand, j) + 2 * q));
              float2 sum = make_float2(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
              if (add) sum = make_float2(at->x + sum.x, at->y + sum.y);
              *at = sum;
            }
          }
        }
      }
    };
    if (slice < 4) keep(false);
    if constexpr (kSlices == 8) {
      __syncthreads();
      if (slice >= 4) keep(true);
    }
    finish_unit<4, kParts, kParts>(thread, s, rows, group, groups, first, end, per_group, epilogue);
#pragma unroll
    for (int mt = 0; mt < 4; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.f;  // after the unit: the sums are not live across its end
  }
}

// --- The wgmma core (the fact gemv_core = 1) ---------------------------------------------------------------------
// wgmma's shared-memory matrix descriptor of a K-major operand whose rows are 128 bytes (one slab row: 64 bf16),
// 128-byte swizzled, 8-row groups 1024 bytes apart, starting at `addr` (the slab's base, 1024-aligned, plus 32 bytes
// per k-step of 16: the swizzle is a function of the address bits, so a k-step is an offset of the start):
// start >> 4 in bits 0-13, the leading offset (unused for a swizzled K-major operand: 1) in 16-29, the stride
// offset 1024 >> 4 in 32-45, base offset 0 (1024-aligned slabs), swizzle mode 1 (128 bytes) in 62-63.
__device__ __forceinline__ uint64_t slab_desc(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (1ull << 16) | (static_cast<uint64_t>(1024 >> 4) << 32) |
         (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }

// Ties accumulator registers to this point of the program: the compiler may not move their reads or writes across it
// (wgmma writes them behind the compiler's back until wgmma_wait_all).
template <int kN>
__device__ __forceinline__ void hold(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D[64][kN] += A[64][16] B[kN][16]^T, both K-major from smem (descriptors), fp32 sums, bf16 in. D's fragment, thread t of
// the warpgroup (warp w, lane g * 4 + q): d[4 j + 2 h + e] is row 16 w + g + 8 h, column 8 j + 2 q + e.
__device__ __forceinline__ void wgmma_bf16(float (&d)[8], uint64_t a, uint64_t b) {  // N = 16
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "l"(a), "l"(b), "r"(1));  // scale-d 1: D += A B
}
__device__ __forceinline__ void wgmma_bf16(float (&d)[16], uint64_t a, uint64_t b) {  // N = 32
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
      "%13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(a), "l"(b), "r"(1));
}

// 16 bytes from global `src` (through L2: the o-projection's activation is written earlier in the launch) to shared
// `dst`, or 16 zero bytes when `bytes` is 0 (nothing is read).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, unsigned bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
// One arrival on `bar` once every cp.async this thread issued before has landed (`full` counts these arrivals).
__device__ __forceinline__ void cp_async_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
// Copies `bytes` of this block's smem at `src` to the same offset in block `peer` of the cluster, completing them on the
// peer's mbarrier at this block's offset `bar` (a bulk copy: the async proxy reads `src`).
__device__ __forceinline__ void copy_to_peer(uint32_t src, unsigned peer, unsigned bytes, uint32_t bar) {
  asm volatile(
      "{\n .reg .b32 dst, remote;\n mapa.shared::cluster.u32 dst, %0, %1;\n mapa.shared::cluster.u32 remote, %3, %1;\n"
      " cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [dst], [%0], %2, [remote];\n}"
      ::"r"(src), "r"(peer), "r"(bytes), "r"(bar) : "memory");
}

// The projection on the tensor cores' asynchronous path, for parts of 32 or 16 weight rows (kParts 2 or 4). Each
// iteration's ring stage holds the unit's 256-column chunk of weights as four 128-byte-swizzled slabs [part_rows][64]
// (thread 0's TMA boxes, as in the other core) and the chunk's activation as four slabs [64][64] of the same swizzle
// (every thread's cp.async, 16 bytes each, rows past the batch zero-filled; `full` completes with the weights' bytes
// and the 256 threads' arrivals, and a proxy fence follows its wait, as in moe_mainloop). Warpgroup w (threads
// 128 w ..) multiplies slabs 2 w and 2 w + 1: 8 wgmma m64nNk16 a chunk, N = part_rows, the activation as A (M = 64 rows of the batch) and the weights as B, into kN fp32
// a thread. A stage is refilled at the top of the iteration after the one that read it, once all 8 warps have
// released it (`empty`), for the iteration `stages` on. At the end of a unit each warpgroup stores its sums, rows < B,
// in a [64][64] of its own, and finish_unit adds the two: fp32 order within a warpgroup the wgmma's over k ascending
// in steps of 16 (within a step the tensor core's), then warpgroup 0's + warpgroup 1's (columns 0-127, 128-255 of
// each chunk).
// In clusters of two (share = 2, the link's [launch] cluster) the two blocks run units chunk for chunk (block_first),
// and each copies only half of every activation chunk (slabs 2 rank, 2 rank + 1) from global memory: once its `half`
// has landed, thread 0 bulk-copies it to the same place in the peer's stage (completing there on `full`) and arrives on
// its own `full`; each warp releases a stage on both blocks' `empty`, since the peer writes into it too. So a cluster
// reads each activation chunk from L2 once, where every busy block read all of it (37 MB for qkv at B = 64).
template <int kParts, class Epilogue>
__device__ __forceinline__ void run_wgmma(int thread, const Buffers& s, const __nv_bfloat16* act,
                                          const pl_tensor_map* weight, int rows, int depth, int head_groups,
                                          int preloaded, Epilogue epilogue) {
  static_assert(kParts == 2 || kParts == 4, "a unit of 32 or 16 weight rows");
  constexpr int kPartRows = kRows / kParts, kBand = kPartRows / 2;  // wgmma's N, and the rows of a band
  constexpr int kN = kPartRows / 2;                                  // the accumulators a thread: 64 x N / 128
  constexpr int kWeightBytes = kPartRows * kChunk * 2, kStageBytes = kWeightBytes + kActRows * kChunk * 2;
  constexpr int kPieces = kActRows * kChunk / 8 / (kWarps * 32);     // a thread's 16-byte activation copies a chunk: 8
  const int stages = s.stages;  // a link-time constant
  const int wg = thread / 128, warp = thread % 128 / 32, lane = thread % 32, g = lane / 4, q = lane % 4;
  const int groups = head_groups * kParts, per_group = depth / kChunk;
  const int first = block_first(blockIdx.x, groups, per_group, s.split, s.share),
            end = block_first(blockIdx.x + 1, groups, per_group, s.split, s.share);
  unsigned char* ring = s.smem + s.ring;
  float* out = reinterpret_cast<float*>(s.smem + s.out);

  // This thread's share of iteration it's activation into stage st, then its arrival on the stage's `full`. Piece
  // p = thread + 256 k is row p / 32, 16 bytes c = p % 32 of the chunk (a warp copies one row's 512 bytes), which
  // land in slab c / 8, row r, at 16-byte place (c % 8) ^ (r % 8): the 128-byte swizzle TMA gives the weights.
  // With share = 2 this block copies only its half, slabs 2 rank and 2 rank + 1 (p / 16 is the row, 16 pieces a row),
  // arrives on `half`, and forward() hands the half to the peer once it has landed.
  const bool shared = s.share == 2;  // a link-time constant
  const unsigned rank = shared ? pl_cluster_rank() : 0;
  const auto copy_act = [&](int it, int st) {
    const uint32_t base = pl_smem_addr(ring + st * kStageBytes + kWeightBytes);
    const int col = (it % per_group) * kChunk, per_row = (shared ? kChunk / 2 : kChunk) / 8, c0 = rank * per_row;
#pragma unroll
    for (int k = 0; k < kPieces; ++k) {
      if (shared && k >= kPieces / 2) break;
      const int p = thread + k * kWarps * 32, r = p / per_row, c = c0 + p % per_row;
      const uint32_t dst = base + (c / 8) * kActRows * kSlab * 2 + r * kSlab * 2 + (((c % 8) ^ (r % 8)) << 4);
      cp_async_16(dst, act + static_cast<size_t>(r < rows ? r : 0) * depth + col + c * 8, r < rows ? 16 : 0);
    }
    cp_async_arrive(mbar(s, shared ? s.half : s.full, st));
  };
  // Thread 0, share = 2: once this block's half of stage st (its use-th fill) has landed, the half to the peer's stage
  // st (completing there on `full`), then this block's own arrival on its `full`: its half is here.
  const auto forward = [&](int st, int use) {
    pl_mbar_wait(mbar(s, s.half, st), use & 1);
    pl_fence_proxy_async();  // cp.async wrote it (generic proxy); the bulk copy reads it through the async proxy
    const uint32_t mine = pl_smem_addr(ring + st * kStageBytes + kWeightBytes) + rank * 2 * kActRows * kSlab * 2;
    copy_to_peer(mine, rank ^ 1, kActRows * kChunk, mbar(s, s.full, st));
    pl_mbar_arrive(mbar(s, s.full, st));
  };
  // Iteration it into stage st: its weights (thread 0; not those preload() copied) and its activation (every thread).
  const auto fill = [&](int it, int st, bool weights) {
    if (thread == 0 && weights) copy_weights(s, weight, it, st, per_group, kParts);
    copy_act(it, st);
  };

  const int ahead = min(stages, end - first);
#pragma unroll 1
  for (int m = 0; m < ahead; ++m) fill(first + m, m, m >= preloaded);  // fresh stages: nothing to wait for
  if (shared && thread == 0) {
#pragma unroll 1
    for (int m = 0; m < ahead; ++m) forward(m, 0);
  }
  int pending = -1, pending_use = 0;  // thread 0, share = 2: the stage refilled last, its half not yet handed over
  float acc[kN];
#pragma unroll
  for (int i = 0; i < kN; ++i) acc[i] = 0.f;
  for (int it = first; it < end; ++it) {
    const int n = it - first, stage = n % stages;
    if (shared && thread == 0 && pending >= 0) {  // a refill's half, forwarded one iteration later (it has landed)
      forward(pending, pending_use);
      pending = -1;
    }
    if (n > 0 && it - 1 + stages < end) {  // the stage iteration it - 1 read, for iteration it - 1 + stages
      const int freed = (n - 1) % stages;
      pl_mbar_wait(mbar(s, s.empty, freed), ((n - 1) / stages) & 1);  // (share = 2: the peer's warps have read it too)
      fill(it - 1 + stages, freed, true);
      pending = freed;
      pending_use = (n - 1) / stages + 1;
    }
    pl_mbar_wait(mbar(s, s.full, stage), (n / stages) & 1);
    pl_fence_proxy_async();  // the activation came by cp.async (generic proxy); wgmma reads via the async one
    // (it costs nothing measurable: leaving it out, as CUTLASS's sm90 cp.async GMMA mainloops do, timed the same;
    // bench/NOTES.md, nineteenth session)
    const uint32_t w = pl_smem_addr(ring + stage * kStageBytes), a = w + kWeightBytes;
    hold(acc);
    wgmma_fence();
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int slab = 2 * wg + half;
#pragma unroll
      for (int k = 0; k < kSlab / 16; ++k)
        wgmma_bf16(acc, slab_desc(a + slab * kActRows * kSlab * 2 + 32 * k), slab_desc(w + slab * kPartRows * kSlab * 2 + 32 * k));
    }
    wgmma_commit();
    wgmma_wait_all();
    hold(acc);
    __syncwarp();
    if (lane == 0) {
      pl_mbar_arrive(mbar(s, s.empty, stage));
      if (shared) pl_mbar_arrive_cluster(mbar(s, s.empty, stage), rank ^ 1);  // the peer writes its half here too
    }

    const int group = it / per_group;
    if (it + 1 != end && it + 1 != (group + 1) * per_group) continue;  // the unit goes on in this block
    // This warpgroup's sums into slice wg of `out`, rows < B: d[4 j + 2 h + e] is row 16 warp + g + 8 h, stage row
    // (the unit's weight row) 8 j + 2 q + e, which is the group's column band_col(lo, kBand, .) (an 8-row step never
    // crosses a band: kBand is 16 or 8).
    const int lo = (group % kParts) * kBand;
    float* mine = out + wg * kRows * 64;
#pragma unroll
    for (int j = 0; j < kPartRows / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = 16 * warp + g + 8 * h;
        if (r < rows)
          *reinterpret_cast<float2*>(mine + out_at(r, band_col(lo, kBand, 8 * j) + 2 * q)) =
              make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
      }
    finish_unit<2, kParts, kParts>(thread, s, rows, group, groups, first, end, per_group, epilogue);
#pragma unroll
    for (int i = 0; i < kN; ++i) acc[i] = 0.f;
  }
  if (shared) {
    // The peer's bulk copies read this block's halves from its ring, and nothing says when they are done but the
    // peer's release of each stage: before the ring's smem becomes the next phase's (the attention's, after qkv),
    // wait for the peer's warps' last arrivals on every stage's `empty`.
    const int count = end - first;
    if (thread == 0)
      for (int st = 0; st < min(stages, count); ++st) pl_mbar_wait(mbar(s, s.empty, st), ((count - 1 - st) / stages) & 1);
    __syncthreads();
  }
}

// The projection at the link's gemv_slices (a link-time constant: LTO folds the test and drops the other core).
// `preloaded`: the iterations thread 0 already copied into the ring (preload(); 0 in the other threads, and where
// nothing was preloaded). The epilogue is called as epilogue(group, lo, width, out) for each unit completed here: its
// valid columns of `out` are lo .. lo + width - 1 and 32 + lo .. 32 + lo + width - 1 (all 64 for whole groups).
template <class Epilogue>
__device__ __forceinline__ void run(int thread, const Buffers& s, const __nv_bfloat16* act, const pl_tensor_map* weight,
                                    int rows, int depth, int groups, int preloaded, Epilogue epilogue) {
  // Link-time constants: LTO folds the tests and keeps one core.
  // 8 slices for whole groups only (the contracts' limit): each core instantiated here is code the inliner weighs
  // before the facts fold, and the entries sit near its limit (one more binding field once tipped o-proj's over).
  const auto with_slices = [&](auto parts) {
    if constexpr (decltype(parts)::value == 1) {
      if (s.slices == 8) {
        run_sliced<8, 1>(thread, s, act, weight, rows, depth, groups, preloaded, epilogue);
        return;
      }
    }
    run_sliced<4, decltype(parts)::value>(thread, s, act, weight, rows, depth, groups, preloaded, epilogue);
  };
  if (s.core) {  // the contracts' limits: parts of 32 or 16 rows
    if (s.part_rows == 16)
      run_wgmma<4>(thread, s, act, weight, rows, depth, groups, preloaded, epilogue);
    else
      run_wgmma<2>(thread, s, act, weight, rows, depth, groups, preloaded, epilogue);
  } else if (s.part_rows == 16)
    with_slices(std::integral_constant<int, 4>{});
  else if (s.part_rows == 32)
    with_slices(std::integral_constant<int, 2>{});
  else
    with_slices(std::integral_constant<int, 1>{});
}
}  // namespace llama_gemv

// attn_long_wt: decode attention for long contexts (split-KV flash decoding, "warp tiles"), a
// whole-block phase after llama_qkv_rope. Same ports, facts and results as attn_long and attn_short.
//
//   o[b, h, :] = softmax_j(q[b, h] . K[b, h / 4, j] / 8) V[b, h / 4, j],  j = 0 .. L
//
// Work items are attn_long's: (sequence, KV head, split), S splits of the context's 64-key tiles,
// S the most that keeps items <= blocks (at most kMaxSplits). What changes is who takes a tile: in
// attn_long the eight warps share every tile (8 keys each), so each tile's latency chain (wait for
// the bytes, scores, max, exp, P.V) is paid by the block tile after tile, and one chain per ~850
// cycles is what HBM needs: it reached 53 % of the read bandwidth. Here each warp owns whole tiles,
// first + warp, first + warp + 8, ... of the item, and keeps its own online softmax (max m, sum l,
// output acc for the group's 4 heads) over them, so eight chains overlap: a warp has ~8 x 850
// cycles per tile, several times its chain. At the end of an item the warps' states merge in smem
// into the split's record (as in attn_long); with one split it is the answer, stored directly. The
// merge costs a block barrier per item, where the warps with fewer tiles wait for the others; each
// warp reaches it with its next item's tiles already in flight in its slots, so HBM keeps streaming
// through the barrier, and the warps, several times faster than the bytes arrive, catch up.
//
// The ring. Each warp streams its own tiles through its own slots: the ring of kv_stages x 16 KB
// is cut into 2 kv_stages slots of 8 KB (a K tile or a V tile, one 8 KB bulk copy each, contiguous
// in the cache) and warp w owns slots w P .. w P + P - 1, P = 2 kv_stages / 8: 3 at the default 12
// stages (192 KB, what this phase's ~200 KB of smem allows). A warp's halves K0 V0 K1 V1 ... go
// through its slots in turn, and its lane 0 refills a slot once the warp's products that read it
// are issued (the refill's ~60 instructions then overlap the tensor core's latency): with 3 slots
// the next tile's K is in flight for a whole tile and its V for most of one, and the SM keeps up
// to 192 KB in flight, several times what HBM's latency needs at one SM's share of the bandwidth
// (~17 B per cycle x a few thousand cycles). A slot has one producer and one consumer, the same
// warp, so the ring needs no cross-warp protocol. (Slots shared by warps would need one: with warps
// on different tiles, a warp could wait on phase k + 1 of a slot whose phase k, another warp's
// tile, has not landed yet, and a parity wait cannot tell the two apart; a single producer thread
// would also refill 8 warps' slots only as often as its own warp comes round.) `empty` (one
// arrival) still orders the lanes' reads before the copy that overwrites the slot, as the ABI's
// ring does. Tiles that do not hold row L are copied while the block waits at the first grid
// barrier. With fewer than 4 stages, 2 kv_stages warps consume, one slot each.
//
// The products, on the tensor cores (mma.sync m16n8k16, bf16 in, fp32 sums), are transposed so
// that the 64 keys and the 64 dims fill the 16-row side and the 4 heads the 8-column side (the
// other way round, the heads would fill 4 of 16 rows: twice the mma and twice the registers):
//   scores  S^T[16 keys x 8] = K[16 keys x 64 dims] Q^T[64 x 8 (heads 0..3, 4..7 zero)]:
//           4 key blocks x 4 k16 steps = 16 mma per tile;
//   output  O^T[16 dims x 8] += V^T[16 dims x 64 keys] P^T[64 keys x 8]: 4 dim blocks x 4 k16
//           steps = 16 mma, plus one per step with an all-ones A, whose rows are then
//           sum_j P[h, j]: the softmax sum l of exactly the bf16 weights the products used.
// P^T's B fragment is the scores' C fragment transposed: C holds (key g, heads 2q, 2q + 1), B
// needs (keys 2q, 2q + 1, head g); movmatrix.trans does that per 8 x 8 block (8 per tile).
// Operands come from the unswizzled 128-byte rows the bulk copy lays down, without bank conflicts,
// by spending two freedoms as attn_long does: a dot product takes its dims in any order if both
// operands use the same one, and O's rows (dims) may be any permutation:
//   K: lane (g, q) reads dims 16q..16q+15 of keys g and g + 8 of each block (two 16-byte loads,
//      odd g reads its halves in the other order, so each quarter warp touches all 32 banks);
//      k-index 2q+e of step s is dim 16q + 4s + e, 2q+8+e is 16q + 4s + 2 + e (the same for Q);
//   V: lane (g, q) needs dims 8g..8g+7 of keys 2q, 2q + 1, 2q + 8, 2q + 9 of each step (row g of
//      dim block i is dim 8g + 2i, row g + 8 is 8g + 2i + 1: one word holds both); it reads them
//      word by word, lane (g, q) starting at word q of its four so that 32 lanes hit 32 banks,
//      rotates them back and pairs the keys with byte permutes.
// So lane (g, q < 2) ends with heads 2q, 2q + 1 at dims 8g..8g+7; lanes q = 2, 3 hold the zero
// heads' columns, computed and never read. Scores are kept in log2 units (log2(e) / 8 folded into
// one multiply), so exp is one ex2.
//
// Rows past L in the last tile hold whatever the caller's cache holds (NaN included): their scores
// are masked to -inf after the mma (a select, so a NaN score is harmless) and their V words are
// zeroed (P = 0 would not do: 0 * NaN = NaN in the tensor core).
//
// With several splits per (sequence, KV head) the records go to the `splits` workspace; after a
// grid barrier, each output element combines its splits: sum_s 2^(m_s - M) o_s / sum_s 2^(m_s - M) l_s.

#include <cuda_bf16.h>

#include "llama_splits.cuh"

namespace {
using llama_splits::fast_exp2;
using llama_splits::kGroup;        // query heads per KV head
using llama_splits::kPartRow;      // a warp's head in `partial`
constexpr int kTile = 64;       // keys per tile
constexpr int kWarps = 8;       // warps of the block
constexpr int kHalf = 8192;     // bytes of a K or a V tile: one slot
constexpr float kScoreScale = 0.125f * 1.4426950408889634f;  // 1 / sqrt(64) and log2(e): scores in log2 units
constexpr unsigned kOnes = 0x3F803F80u;                      // bf16 (1, 1): the A operand that sums P

// D = A B + D on the tensor cores, bf16 in, fp32 sums (PTX fragment layouts: a0 rows g / k 2q..,
// a1 rows g + 8, a2 k 2q + 8.., a3 both; b0 k 2q.., b1 k 2q + 8..; d rows g (x, y), g + 8 (z, w)).
__device__ __forceinline__ void mma(float4& d, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                    unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d.x), "+f"(d.y), "+f"(d.z), "+f"(d.w)
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The 8 x 8 bf16 block whose row g, columns 2q and 2q + 1 lane (g, q) holds, transposed: lane (g, q)
// gets row g of the transpose, i.e. elements (2q, g) and (2q + 1, g) of the input.
__device__ __forceinline__ unsigned transpose8x8(unsigned x) {
  unsigned y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}

__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
  const __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&p);
}

// One warp's tiles of the block's walk, in the order it consumes them: tiles first + warp,
// + step, ... of items blockIdx.x, + gridDim.x, ... (an item with too few tiles is skipped).
// `row`: the tile's first element in the caches. Only the issuing lane uses it.
struct Cursor {
  int item, tile, end, items, splits, per, tiles, lmax, warp, step;
  size_t row;
  __device__ void seek() {  // from `item`: the first tile of this warp in it or a later item
    for (; item < items; item += gridDim.x) {
      const int first = item % splits * per;
      end = min(first + per, tiles);
      tile = first + warp;
      if (tile < end) {
        row = (static_cast<size_t>(item / splits) * lmax + static_cast<size_t>(tile) * kTile) * 64;
        return;
      }
    }
  }
  __device__ bool done() const { return item >= items; }
  __device__ void advance() {
    tile += step;
    row += static_cast<size_t>(step) * kTile * 64;
    if (tile >= end) {
      item += gridDim.x;
      seek();
    }
  }
};
}  // namespace

extern "C" __device__ void llama_attn_long_wt(pl_ctx ctx, pl_bind_attn_long_wt b) {
  const int warp = ctx.thread / 32, lane = ctx.thread % 32, g = lane / 4, q = lane % 4;
  const int halves = 2 * b.kv_stages;
  const int consumers = min(kWarps, halves), per_warp = halves / consumers;  // warps with slots; slots each
  const int n_keys = b.L + 1, tiles = (n_keys + kTile - 1) / kTile;
  const int pairs = b.B * 8;
  const auto [per, splits, items] = llama_splits::split_context(tiles, pairs);
  const __nv_bfloat16* q_all = reinterpret_cast<const __nv_bfloat16*>(b.q);
  const __nv_bfloat16* k_all = reinterpret_cast<const __nv_bfloat16*>(b.k_cache);
  const __nv_bfloat16* v_all = reinterpret_cast<const __nv_bfloat16*>(b.v_cache);
  __nv_bfloat16* o_all = reinterpret_cast<__nv_bfloat16*>(b.o);
  float* split_out = reinterpret_cast<float*>(b.splits);             // [pairs * splits][4][66]
  float* partial = reinterpret_cast<float*>(ctx.smem + b.partial);  // [8 warps][4 heads][68]
  const unsigned char* ring = ctx.smem + b.ring;
  const bool consumer = warp < consumers;
  const int slot0 = warp * per_warp;  // this warp's slots: slot0 .. slot0 + per_warp - 1

  // Issue side (lane 0): halves issued, halves released, the slot and the parity of its next fill.
  Cursor next{static_cast<int>(blockIdx.x), 0, 0, items, splits, per, tiles, b.Lmax, warp, consumers, 0};
  next.seek();
  int issued = 0, released = 0, islot = 0;
  unsigned iphase = 0;
  // Consume side (every lane): the slot of the next half and the parity of the fill that brings it.
  int cslot = 0;
  unsigned cphase = 0;

  // Keeps per_warp halves in flight. A slot is refilled only after this warp released it (`empty`
  // has completed that phase: the wait returns at once, and orders the lanes' reads before the
  // copy). `early`: before the first grid barrier, the tile holding row L (the last of a pair,
  // being appended by llama_qkv_rope) is not issued yet.
  auto fill = [&](bool early) {
    while (!next.done() && issued < released + per_warp) {
      if (early && next.tile == tiles - 1) return;
      const int slot = slot0 + islot;
      pl_mbar_wait(pl_mbar(ctx, b.empty, slot), iphase ^ 1u);
      const uint32_t full = pl_mbar(ctx, b.full, slot);
      pl_mbar_arrive_expect_tx(full, kHalf);
      pl_bulk_g2s(pl_smem_addr(ring + slot * kHalf), ((issued & 1) ? v_all : k_all) + next.row, kHalf, full);
      if (issued & 1) next.advance();  // K then V of each tile
      ++issued;
      if (++islot == per_warp) {
        islot = 0;
        iphase ^= 1u;
      }
    }
  };
  // The half in slot0 + cslot is read (its products issued): free the slot and refill it.
  auto release = [&]() {
    __syncwarp();  // every lane's reads come before the release
    if (lane == 0) {
      pl_mbar_arrive(pl_mbar(ctx, b.empty, slot0 + cslot));
      ++released;
      fill(false);
    }
    if (++cslot == per_warp) {
      cslot = 0;
      cphase ^= 1u;
    }
  };

  // The previous phase's smem accesses (generic proxy) come before the ring's bulk writes (async proxy).
  pl_fence_proxy_async();
  __syncthreads();
  if (consumer && lane == 0) fill(true);  // the cache rows before L are the caller's: copy them during the barrier
  if (ctx.thread == 0) pl_grid_barrier(b.arrived);  // q and the appended K/V rows are stored
  __syncthreads();
  if (consumer && lane == 0) {
    asm volatile("fence.proxy.async.global;" ::: "memory");  // ... and are read by this lane's bulk copies
    fill(false);
  }

  // This lane's bytes in a slot. K: key g of each 16-key block (and g + 8, 1024 bytes on), dims
  // 16q..16q+15 as two 16-byte loads, odd g the second first: a quarter warp's 8 loads hit 8
  // distinct 16-byte columns.
  const bool odd = g & 1;
  const int k_first = g * 128 + 32 * q + 16 * odd, k_second = k_first + 16 - 32 * odd;
  // V: keys 2q (+ 128 bytes: 2q + 1, + 1024: 2q + 8, + 1152: 2q + 9) of each 16-key step, dims
  // 8g..8g+7 (words 4g..4g+3), word 4g + ((j + q) & 3) at load j: 32 lanes, 32 banks.
  int v_at[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) v_at[j] = 2 * q * 128 + 4 * (4 * g + ((j + q) & 3));

  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int pair = item / splits, seq = pair / 8, kv = pair % 8;
    const int first = item % splits * per, end = min(first + per, tiles);
    float m0 = -INFINITY, m1 = -INFINITY;  // heads 2q, 2q + 1: running max (log2 units)
    float4 acc[4];  // dim block i: heads 2q (.x), 2q + 1 (.y) at dim 8g + 2i; (.z, .w) at 8g + 2i + 1
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    float4 lsum = make_float4(0.f, 0.f, 0.f, 0.f);  // l of heads 2q (.x), 2q + 1 (.y); .z, .w the same, unscaled
    if (consumer) {
      // B fragments of Q^T: lane (g, q) holds head g's dims 16q..16q+15 (words 8q..8q+7); b0 of step
      // s is word 2s, b1 word 2s + 1. Columns 4..7 (g >= 4) are zero.
      unsigned qb[8] = {0u, 0u, 0u, 0u, 0u, 0u, 0u, 0u};
      if (g < kGroup) {
        const uint4* qrow = reinterpret_cast<const uint4*>(q_all + (static_cast<size_t>(seq) * 32 + kv * kGroup + g) * 64);
        const uint4 lo = qrow[2 * q], hi = qrow[2 * q + 1];
        qb[0] = lo.x; qb[1] = lo.y; qb[2] = lo.z; qb[3] = lo.w;
        qb[4] = hi.x; qb[5] = hi.y; qb[6] = hi.z; qb[7] = hi.w;
      }
      for (int tile = first + warp; tile < end; tile += consumers) {
        const int valid = n_keys - tile * kTile;  // keys 0 .. valid - 1 of this tile exist

        // ---- Scores: the whole K tile into registers, the slot refilled, then the products.
        pl_mbar_wait(pl_mbar(ctx, b.full, slot0 + cslot), cphase);
        const unsigned char* kst = ring + (slot0 + cslot) * kHalf;
        uint4 kr[4][2][2];  // block u, key g / g + 8, load
#pragma unroll
        for (int u = 0; u < 4; ++u) {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            kr[u][r][0] = *reinterpret_cast<const uint4*>(kst + u * 2048 + r * 1024 + k_first);
            kr[u][r][1] = *reinterpret_cast<const uint4*>(kst + u * 2048 + r * 1024 + k_second);
          }
        }
        float4 s[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) s[u] = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // dims 16q..16q+7 (steps 0, 1), 16q+8..16q+15 (steps 2, 3)
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            const uint4 a = (odd == (h == 1)) ? kr[u][0][0] : kr[u][0][1];  // key g
            const uint4 c = (odd == (h == 1)) ? kr[u][1][0] : kr[u][1][1];  // key g + 8
            mma(s[u], a.x, c.x, a.y, c.y, qb[4 * h], qb[4 * h + 1]);
            mma(s[u], a.z, c.z, a.w, c.w, qb[4 * h + 2], qb[4 * h + 3]);
          }
        }
        release();  // after the products, so that lane 0's refill overlaps their latency
        if (valid < kTile) {  // the pair's last tile: rows past L are garbage, maybe NaN
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            if (16 * u + g >= valid) s[u].x = s[u].y = -INFINITY;
            if (16 * u + g + 8 >= valid) s[u].z = s[u].w = -INFINITY;
          }
        }

        // ---- Online softmax per head: the max over the tile's 64 keys (8 in this lane, then the
        // 8 lanes of the same q), the weights as bf16, transposed into P^T's B fragments.
        float x0 = fmaxf(fmaxf(s[0].x, s[0].z), fmaxf(s[1].x, s[1].z));
        float x1 = fmaxf(fmaxf(s[0].y, s[0].w), fmaxf(s[1].y, s[1].w));
        x0 = fmaxf(x0, fmaxf(fmaxf(s[2].x, s[2].z), fmaxf(s[3].x, s[3].z)));
        x1 = fmaxf(x1, fmaxf(fmaxf(s[2].y, s[2].w), fmaxf(s[3].y, s[3].w)));
#pragma unroll
        for (int off = 4; off < 32; off *= 2) {
          x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, off));
          x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, off));
        }
        const float n0 = fmaxf(m0, x0 * kScoreScale), n1 = fmaxf(m1, x1 * kScoreScale);
        const float r0 = n0 == -INFINITY ? 0.f : n0, r1 = n1 == -INFINITY ? 0.f : n1;  // no key yet: p = 0, not NaN
        const float alpha0 = fast_exp2(m0 - r0), alpha1 = fast_exp2(m1 - r1);         // 0 on the first keys
        m0 = n0;
        m1 = n1;
        unsigned pb[4][2];  // step u: b0 (keys 2q, 2q + 1 of head g), b1 (keys 2q + 8, 2q + 9)
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          pb[u][0] = transpose8x8(pack_bf16(fast_exp2(fmaf(s[u].x, kScoreScale, -r0)),
                                            fast_exp2(fmaf(s[u].y, kScoreScale, -r1))));
          pb[u][1] = transpose8x8(pack_bf16(fast_exp2(fmaf(s[u].z, kScoreScale, -r0)),
                                            fast_exp2(fmaf(s[u].w, kScoreScale, -r1))));
        }

        // ---- Output: the whole V tile into registers, the slot refilled, then the products.
        pl_mbar_wait(pl_mbar(ctx, b.full, slot0 + cslot), cphase);
        const unsigned char* vst = ring + (slot0 + cslot) * kHalf;
        unsigned vw[4][4][4];  // step u, key 2q / 2q + 1 / 2q + 8 / 2q + 9, load j (word (j + q) & 3)
#pragma unroll
        for (int u = 0; u < 4; ++u) {
#pragma unroll
          for (int r = 0; r < 4; ++r) {
#pragma unroll
            for (int j = 0; j < 4; ++j)
              vw[u][r][j] = *reinterpret_cast<const unsigned*>(vst + u * 2048 + (r & 1) * 128 + (r >> 1) * 1024 + v_at[j]);
          }
        }
        if (valid < kTile) {
#pragma unroll
          for (int u = 0; u < 4; ++u) {
#pragma unroll
            for (int r = 0; r < 4; ++r) {
              if (16 * u + 2 * q + (r & 1) + (r >> 1) * 8 >= valid) {
#pragma unroll
                for (int j = 0; j < 4; ++j) vw[u][r][j] = 0u;
              }
            }
          }
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          acc[i].x *= alpha0;
          acc[i].y *= alpha1;
          acc[i].z *= alpha0;
          acc[i].w *= alpha1;
        }
        lsum.x *= alpha0;
        lsum.y *= alpha1;
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          unsigned w[4][4];  // key r, word i (dims 8g + 2i, 8g + 2i + 1): rotated back by q & 1, then q & 2
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            unsigned t[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) t[i] = (q & 1) ? vw[u][r][(i + 3) & 3] : vw[u][r][i];
#pragma unroll
            for (int i = 0; i < 4; ++i) w[r][i] = (q & 2) ? t[(i + 2) & 3] : t[i];
          }
#pragma unroll
          for (int i = 0; i < 4; ++i) {  // A of V^T, dim block i: (dim, key pair) from the two keys' words
            mma(acc[i], __byte_perm(w[0][i], w[1][i], 0x5410u), __byte_perm(w[0][i], w[1][i], 0x7632u),
                __byte_perm(w[2][i], w[3][i], 0x5410u), __byte_perm(w[2][i], w[3][i], 0x7632u), pb[u][0], pb[u][1]);
          }
          mma(lsum, kOnes, kOnes, kOnes, kOnes, pb[u][0], pb[u][1]);
        }
        release();
      }
    }
    // This warp's record (a warp without a tile in the item leaves m = -inf, l = 0, acc = 0).
    if (q < 2) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float* row = partial + (warp * kGroup + 2 * q + e) * kPartRow;
        float4* at = reinterpret_cast<float4*>(row + 8 * g);
        at[0] = e ? make_float4(acc[0].y, acc[0].w, acc[1].y, acc[1].w) : make_float4(acc[0].x, acc[0].z, acc[1].x, acc[1].z);
        at[1] = e ? make_float4(acc[2].y, acc[2].w, acc[3].y, acc[3].w) : make_float4(acc[2].x, acc[2].z, acc[3].x, acc[3].z);
        if (g == 0) {
          row[64] = e ? m1 : m0;
          row[65] = e ? lsum.y : lsum.x;
        }
      }
    }
    __syncthreads();
    llama_splits::merge_warps(ctx.thread, partial, splits, item, seq, kv, split_out, o_all);
    __syncthreads();  // the records are read before the next item writes them
  }
  pl_fence_proxy_async();  // this phase's smem reads come before the next phase's bulk writes
  if (splits == 1) return;  // every output is stored (the same in every block: no barrier to skip alone)
  __syncthreads();
  if (ctx.thread == 0) pl_grid_barrier(b.arrived);  // every split is written
  __syncthreads();
  llama_splits::combine(ctx.thread, split_out, o_all, b.B, splits);
}

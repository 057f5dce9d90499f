// moe_bwd_plan: the MoE backward's tile table, a whole-block phase before the tile loops. Two grid barriers order it
// across blocks:
//   1. every block has added its share of the saved ids to the per-expert counts (a histogram in smem first, then
//      one atomic per expert and block);
//   2. every block has written its tiles' entries (block 0 also the header and the offsets): the tile loops may read
//      the table, the gather the offsets.
// Between them every block derives the padded offsets from the counts as the forward permute does (each expert's
// rows padded to tile_m, rows from 0; the same numbers, since ids are the forward's), and writes the entries of the
// tiles it runs itself (blockIdx.x, + gridDim.x, ...), blockDim.x of them at a time: each thread one entry and its
// k-steps, a block scan of those for pos0 (the ring position of the tile's first k-step in the block's stream).
//
// The table: int32 [0] the tile count, [1..3] the first tile of kinds 1, 2, 3; from word table_header, tile_words
// words per tile {kind, expert, row0, rows, m0, n0, pos0, 0}, in this order:
//   kind 0  da = do W2_e:   the used m-tiles (offsets[E] / tile_m), m-tile major, n0 over I (tile_n steps);
//                           expert the owner of row0, rows = tile_m, m0 = 0; K = H
//   kind 1  dW2_e:          per expert e (also one without rows), row0 = offsets[e], rows = its padded rows,
//                           m0 over H (tile_m steps) major, n0 over I (tile_n steps); K = rows
//   kind 2  dxp = dh W1_e:  the m-tiles, m-tile major, n0 over H; m0 = 0; K = 2 I
//   kind 3  dW1_e:          per expert, m0 over 2 I (tile_m steps) major, n0 over H; K = rows
// k-steps of a tile: K / kTileK.

namespace {
constexpr int kTileK = 64;  // the k-step of the backward mainloop: a tile of reduction length K is K / kTileK steps

struct alignas(16) Entry {
  int kind, expert, row0, rows, m0, n0, pos0, zero;
};

// The table's shape once the offsets are known: tiles of each kind and the first tile of each.
struct Layout {
  int experts, m_tiles, n_i, n_h, per1, per3;  // per1, per3: tiles of one expert in kinds 1 and 3
  int first1, first2, first3, total;
  int tile_m, tile_n, H, I;
};

static __host__ __device__ Layout layout_of(int experts, int used_rows, int H, int I, int tile_m, int tile_n) {
  Layout l;
  l.experts = experts;
  l.m_tiles = used_rows / tile_m;
  l.n_i = I / tile_n;
  l.n_h = H / tile_n;
  l.per1 = H / tile_m * l.n_i;
  l.per3 = 2 * I / tile_m * l.n_h;
  l.first1 = l.m_tiles * l.n_i;
  l.first2 = l.first1 + experts * l.per1;
  l.first3 = l.first2 + l.m_tiles * l.n_h;
  l.total = l.first3 + experts * l.per3;
  l.tile_m = tile_m;
  l.tile_n = tile_n;
  l.H = H;
  l.I = I;
  return l;
}

// The expert whose padded rows hold `row`: offsets ascend, offsets[E] is the end, and an expert without rows shares
// its offset with the next one, so the last expert whose offset is at most `row` owns it.
static __host__ __device__ int expert_of(const int* offsets, int experts, int row) {
  int lo = 0, hi = experts - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= row) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// Tile i's entry (pos0 left 0) and its k-steps.
static __host__ __device__ Entry tile_at(const Layout& l, const int* offsets, int i, int& ksteps) {
  Entry t{0, 0, 0, 0, 0, 0, 0, 0};
  if (i < l.first1 || (i >= l.first2 && i < l.first3)) {  // kinds 0 and 2: an m-tile of the used rows
    const bool dxp = i >= l.first2;
    const int j = dxp ? i - l.first2 : i, per = dxp ? l.n_h : l.n_i;
    t.kind = dxp ? 2 : 0;
    t.row0 = j / per * l.tile_m;
    t.expert = expert_of(offsets, l.experts, t.row0);
    t.rows = l.tile_m;
    t.n0 = j % per * l.tile_n;
    ksteps = (dxp ? 2 * l.I : l.H) / kTileK;
  } else {  // kinds 1 and 3: an output tile of one expert's weight gradient, reduced over its rows
    const bool dw1 = i >= l.first3;
    const int j = dw1 ? i - l.first3 : i - l.first1, per = dw1 ? l.per3 : l.per1, n = dw1 ? l.n_h : l.n_i;
    const int e = j / per, r = j % per;
    t.kind = dw1 ? 3 : 1;
    t.expert = e;
    t.row0 = offsets[e];
    t.rows = offsets[e + 1] - offsets[e];
    t.m0 = r / n * l.tile_m;
    t.n0 = r % n * l.tile_n;
    ksteps = t.rows / kTileK;
  }
  return t;
}

// Inclusive scan of one int per thread over the block (blockDim.x a multiple of 32, at most 1024), in every thread;
// `total` gets the block's sum. `warp_sums` holds 32 ints of smem; it may be reused once this returns.
static __device__ int block_scan(int value, int* warp_sums, int& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  int x = value;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, d);
    if (lane >= d) x += y;
  }
  if (lane == 31) warp_sums[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int w = lane < warps ? warp_sums[lane] : 0;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, w, d);
      if (lane >= d) w += y;
    }
    if (lane < warps) warp_sums[lane] = w;
  }
  __syncthreads();
  const int before = warp > 0 ? warp_sums[warp - 1] : 0;
  total = warp_sums[warps - 1];
  __syncthreads();
  return before + x;
}
}  // namespace

extern "C" __device__ void moe_bwd_plan_tiles(pl_ctx ctx, pl_bind_moe_bwd_plan b) {
  const int* ids = reinterpret_cast<const int*>(b.ids);
  int* counts = reinterpret_cast<int*>(b.counts);
  int* offsets_out = reinterpret_cast<int*>(b.offsets);
  int* table = reinterpret_cast<int*>(b.table);
  int* starts = reinterpret_cast<int*>(ctx.smem + b.starts);
  int* scan = reinterpret_cast<int*>(ctx.smem + b.scan);
  const int pairs = b.T * b.topk;

  // 1. Counts: this block's share of the pairs into an smem histogram, then one atomic per expert.
  for (int e = ctx.thread; e < b.E; e += blockDim.x) starts[e] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + ctx.thread; i < pairs; i += gridDim.x * blockDim.x) atomicAdd(&starts[ids[i]], 1);
  __syncthreads();
  for (int e = ctx.thread; e < b.E; e += blockDim.x)
    if (starts[e] != 0) atomicAdd(&counts[e], starts[e]);
  __syncthreads();
  if (ctx.thread == 0) pl_grid_sync(b.arrived, 1);  // every pair is counted
  __syncthreads();

  // 2. Offsets: expert e's count padded to tile_m in thread e (E <= 128 <= the block's threads), an exclusive scan.
  const int padded = ctx.thread < b.E
      ? (pl_ld_acquire_int(reinterpret_cast<const unsigned char*>(counts + ctx.thread)) + b.tile_m - 1) / b.tile_m * b.tile_m
      : 0;
  int used_rows;
  const int inclusive = block_scan(padded, scan, used_rows);
  if (ctx.thread < b.E) starts[ctx.thread] = inclusive - padded;
  if (ctx.thread == 0) starts[b.E] = used_rows;
  __syncthreads();
  if (blockIdx.x == 0)
    for (int e = ctx.thread; e <= b.E; e += blockDim.x) offsets_out[e] = starts[e];

  // 3. The table: the header (block 0), then this block's tiles blockIdx.x + l gridDim.x, l = 0, 1, ...
  const Layout l = layout_of(b.E, used_rows, b.H, b.I, b.tile_m, b.tile_n);
  if (blockIdx.x == 0 && ctx.thread == 0) {
    table[0] = l.total;
    table[1] = l.first1;
    table[2] = l.first2;
    table[3] = l.first3;
  }
  const int mine = l.total > static_cast<int>(blockIdx.x) ? (l.total - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  int carry = 0;  // k-steps of this block's tiles written so far
  for (int base = 0; base < mine; base += blockDim.x) {  // block-uniform: every thread takes part in the scan
    const int local = base + ctx.thread;
    const int i = blockIdx.x + local * gridDim.x;
    int ksteps = 0;
    Entry t{};
    if (local < mine) t = tile_at(l, starts, i, ksteps);
    int chunk;
    const int inclusive_k = block_scan(ksteps, scan, chunk);
    if (local < mine) {
      t.pos0 = carry + inclusive_k - ksteps;
      int4* at = reinterpret_cast<int4*>(table + b.table_header + static_cast<size_t>(i) * b.tile_words);
      at[0] = make_int4(t.kind, t.expert, t.row0, t.rows);
      at[1] = make_int4(t.m0, t.n0, t.pos0, 0);
    }
    carry += chunk;
  }
  __syncthreads();
  if (ctx.thread == 0) pl_grid_sync(b.arrived, 2);  // table and offsets complete
  __syncthreads();
}

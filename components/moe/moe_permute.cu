// moe_permute: groups the routed (token, slot) pairs by expert, a whole-block phase before the
// expert GEMM's tile loops. Three grid barriers order it across blocks:
//   1. the router's ids are complete; every block counts its share of them per expert;
//   2. the counts are complete; every block derives the padded offsets (each expert's rows start
//      at a multiple of tile_m), places its share of the pairs (a per-expert cursor), marks the
//      padding rows and writes its share of the tile table;
//   3. the maps and the table are complete: the tile loops may read them.
// Within an expert the order of rows is that of the cursor's atomics: it changes from run to run,
// and no result depends on it (each row's products are its own; the combine sums a token's slots
// in slot order).

namespace {
struct Tile { int expert, row0, n0, kind; };

// The expert whose padded rows hold `row`: offsets are ascending, offsets[E] is the end.
__device__ int expert_of(const int* offsets, int experts, int row) {
  int lo = 0, hi = experts - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= row) lo = mid; else hi = mid - 1;
  }
  return lo;
}
}  // namespace

extern "C" __device__ void moe_permute_group(pl_ctx ctx, pl_bind_moe_permute b) {
  const int* ids = reinterpret_cast<const int*>(b.ids);
  int* counts = reinterpret_cast<int*>(b.counts);
  int* cursor = reinterpret_cast<int*>(b.cursor);
  int* row_token = reinterpret_cast<int*>(b.row_token);
  int* token_row = reinterpret_cast<int*>(b.token_row);
  int* table = reinterpret_cast<int*>(b.table);
  int* offsets = reinterpret_cast<int*>(ctx.smem + b.offsets);
  const int pairs = b.T * b.topk;
  const int stride = gridDim.x * blockDim.x;
  const int first = blockIdx.x * blockDim.x + ctx.thread;

  __syncthreads();
  if (ctx.thread == 0) pl_grid_sync(b.arrived, 1);  // every token is routed
  __syncthreads();
  for (int i = first; i < pairs; i += stride) atomicAdd(&counts[ids[i]], 1);
  __syncthreads();
  if (ctx.thread == 0) pl_grid_sync(b.arrived, 2);  // every pair is counted
  __syncthreads();
  if (ctx.thread == 0) {
    int row = 0;  // from row_base: offsets count rows of the permuted space past it
    for (int e = 0; e < b.E; ++e) {
      offsets[e] = row;
      row += (pl_ld_acquire_int(reinterpret_cast<const unsigned char*>(counts + e)) + b.tile_m - 1) / b.tile_m * b.tile_m;
    }
    offsets[b.E] = row;
  }
  __syncthreads();
  for (int i = first; i < pairs; i += stride) {
    const int e = ids[i];
    const int row = b.row_base + offsets[e] + atomicAdd(&cursor[e], 1);
    row_token[row] = i / b.topk;
    token_row[b.slot_major ? (i % b.topk) * b.T + i / b.topk : i] = row;
  }
  // Padding rows: the last tile of each expert, past its count.
  for (int e = blockIdx.x; e < b.E; e += gridDim.x) {
    const int count = pl_ld_acquire_int(reinterpret_cast<const unsigned char*>(counts + e));
    for (int row = offsets[e] + count + ctx.thread; row < offsets[e + 1]; row += blockDim.x)
      row_token[b.row_base + row] = -1;
  }
  // The tile table: every gate/up tile, then every down-projection tile. A down tile of an m-tile
  // waits, in the GEMM, for that m-tile's gate/up tiles; they all come earlier in the table.
  // band = 0: m-tile major (the blocks in flight share rows of A). band > 0: bands of `band`
  // m-tiles, each walked n-tile by n-tile, so the blocks in flight share each weight tile and an
  // expert's weights are read once per band (CUTLASS's raster swizzle).
  const int m_tiles = offsets[b.E] / b.tile_m;
  const int n1 = 2 * b.I / b.tile_n, n2 = b.H / b.tile_n;
  const int gate_up = m_tiles * n1, tiles = gate_up + m_tiles * n2;
  for (int i = first; i < tiles; i += stride) {
    const bool down = i >= gate_up;
    const int j = down ? i - gate_up : i, per = down ? n2 : n1;
    int m = j / per, n = j % per;
    if (b.band > 0) {
      const int first_m = j / (b.band * per) * b.band;  // every band but the last is full
      const int rows = min(b.band, m_tiles - first_m), r = j - first_m * per;
      m = first_m + r % rows;
      n = r / rows;
    }
    const int row0 = m * b.tile_m;
    *reinterpret_cast<Tile*>(table + b.table_header + i * b.tile_words) =
        Tile{expert_of(offsets, b.E, row0), b.row_base + row0, n * b.tile_n, down ? 1 : 0};
  }
  if (first == 0) {
    table[0] = tiles;
    table[1] = gate_up;
  }
  __syncthreads();
  if (ctx.thread == 0) pl_grid_sync(b.arrived, 3);  // maps and table complete
  __syncthreads();
}

// ring_reduce: consumer warpgroups that wait on the ring, fold every stage of a row-tile into
// register accumulators, and free each stage for the producer.
//
// Per tile: acc(row, col) = sum over k-chunks c of X[tile_row * tile_rows + row, c * tile_cols + col].
// Thread t owns column t % tile_cols and rows t / tile_cols + v * (threads / tile_cols): a warp
// reads 32 consecutive floats of one row, so shared-memory reads are free of bank conflicts.
// Compile-time facts (pl_facts): tile_rows, tile_cols and the role size consumer_threads fix the
// accumulator's shape.

namespace {
constexpr int kThreads = pl_facts::consumer_threads;
constexpr int kValues = pl_facts::tile_rows * pl_facts::tile_cols / kThreads;
constexpr int kRowStep = kThreads / pl_facts::tile_cols;
static_assert(kThreads % pl_facts::tile_cols == 0, "consumer threads must be a multiple of tile_cols");
}

extern "C" __device__ void ring_reduce_tile(pl_ctx ctx, pl_bind_ring_reduce b, float (&acc)[kValues]) {
  const int col = ctx.thread % pl_facts::tile_cols;
  const int row0 = ctx.thread / pl_facts::tile_cols;
#pragma unroll
  for (int v = 0; v < kValues; ++v) acc[v] = 0.f;
  const int k_chunks = b.K / pl_facts::tile_cols;
  constexpr int stage_floats = pl_facts::tile_rows * pl_facts::tile_cols;
  const float* ring = reinterpret_cast<const float*>(ctx.smem + b.ring);
  for (int c = 0; c < k_chunks; ++c) {
    const int n = ctx.iter * k_chunks + c;
    const int stage = n % b.stages;
    pl_mbar_wait(pl_mbar(ctx, b.full, stage), (n / b.stages) & 1);
    const float* tile = ring + stage * stage_floats;
#pragma unroll
    for (int v = 0; v < kValues; ++v) acc[v] += tile[(row0 + v * kRowStep) * pl_facts::tile_cols + col];
    __syncwarp();
    if ((ctx.thread & 31) == 0) pl_mbar_arrive(pl_mbar(ctx, b.empty, stage));  // one arrival per warp
  }
}

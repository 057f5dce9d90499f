// ring_reduce: consumer warpgroups that wait on the ring, fold every stage of a row-tile into
// register accumulators, and free each stage for the producer.
//
// Per tile: acc(row, col) = sum over k-chunks c of X[tile_row * tile_rows + row, c * tile_cols + col].
// Reads are 16 bytes wide (LDS.128): thread t owns the 4 columns 4 (t % kQuads) .. +3 and rows
// t / kQuads + r * kRowStep, kQuads = tile_cols / 4 threads per row. A quarter-warp (the 8 threads
// one LDS.128 wavefront serves) reads 128 consecutive bytes of one row: all 32 banks, no conflict.
// Compile-time facts (pl_facts): tile_rows, tile_cols and the role size consumer_threads fix the
// accumulator's shape.

namespace {
constexpr int kThreads = pl_facts::consumer_threads;
constexpr int kCols = pl_facts::tile_cols;
constexpr int kQuads = kCols / 4;                  // threads per tile row, 4 floats each
constexpr int kRowStep = kThreads / kQuads;        // rows between a thread's float4s
constexpr int kReads = pl_facts::tile_rows / kRowStep;  // float4 reads per thread per stage
constexpr int kValues = 4 * kReads;
static_assert(kCols % 4 == 0 && kThreads % kQuads == 0, "a tile row must split into whole float4s over the threads");
static_assert(pl_facts::tile_rows % kRowStep == 0, "every thread reads the same number of float4s");
}

extern "C" __device__ void ring_reduce_tile(pl_ctx ctx, pl_bind_ring_reduce b, float (&acc)[kValues]) {
  const int quad = ctx.thread % kQuads;
  const int row0 = ctx.thread / kQuads;
#pragma unroll
  for (int v = 0; v < kValues; ++v) acc[v] = 0.f;
  const int k_chunks = b.K / kCols;
  constexpr int stage_floats = pl_facts::tile_rows * kCols;
  const float4* ring = reinterpret_cast<const float4*>(ctx.smem + b.ring);
  for (int c = 0; c < k_chunks; ++c) {
    const int n = ctx.iter * k_chunks + c;
    const int stage = n % b.stages;
    pl_mbar_wait(pl_mbar(ctx, b.full, stage), (n / b.stages) & 1);
    const float4* tile = ring + stage * (stage_floats / 4) + row0 * kQuads + quad;
#pragma unroll
    for (int r = 0; r < kReads; ++r) {
      const float4 x = tile[r * kRowStep * kQuads];
      acc[4 * r] += x.x;
      acc[4 * r + 1] += x.y;
      acc[4 * r + 2] += x.z;
      acc[4 * r + 3] += x.w;
    }
    // The producer may overwrite the stage once every warp has arrived: __syncwarp orders the
    // lanes' reads before lane 0's arrive, which has release semantics.
    __syncwarp();
    if ((ctx.thread & 31) == 0) pl_mbar_arrive(pl_mbar(ctx, b.empty, stage));  // one arrival per warp
  }
}

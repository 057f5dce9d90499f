// ring_producer: one warp streams row-tiles of a row-major fp32 matrix X[M, K] into a
// shared-memory ring with the TMA engine (cp.async.bulk, 1-D form), one row segment per copy,
// and signals each stage on its "full" mbarrier with the stage's transaction bytes.
// It waits on the stage's "empty" mbarrier before overwriting it.
//
// Bindings (pl_bind_ring_producer, generated from ring_producer.toml): K, tile_rows, tile_cols,
// stages, ring_arrivals, stage_bytes; ring (smem offset); full, empty (mbarrier offsets); x.

extern "C" __device__ void ring_producer_load(pl_ctx ctx, pl_bind_ring_producer b) {
  const int lane = ctx.thread & 31;
  const int k_chunks = b.K / b.tile_cols;
  const unsigned row_bytes = b.tile_cols * 4u;
  const float* tile_src = b.x + static_cast<long long>(ctx.tile_row) * b.tile_rows * b.K;
  for (int c = 0; c < k_chunks; ++c) {
    const int n = ctx.iter * k_chunks + c;  // position in this block's stream of stages
    const int stage = n % b.stages;
    const unsigned phase = (n / b.stages) & 1;
    // A fresh barrier counts as having completed the phase before phase 0, so waiting on
    // parity (phase ^ 1) lets the first pass over the ring through.
    pl_mbar_wait(pl_mbar(ctx, b.empty, stage), phase ^ 1);
    const uint32_t full = pl_mbar(ctx, b.full, stage);
    if (lane == 0) pl_mbar_arrive_expect_tx(full, b.stage_bytes);
    __syncwarp();
    const uint32_t dst = pl_smem_addr(ctx.smem + b.ring + stage * b.stage_bytes);
    for (int r = lane; r < b.tile_rows; r += 32) {
      pl_bulk_g2s(dst + r * row_bytes, tile_src + static_cast<long long>(r) * b.K + c * b.tile_cols, row_bytes,
                  full);
    }
  }
}

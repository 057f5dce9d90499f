// bulk_producer: one thread streams each tile of a 1-D fp32 array x[N] into a shared-memory ring,
// one bulk copy (cp.async.bulk, the TMA engine without a tensor map) of `chunk` floats per stage,
// completing the stage's bytes on its "full" mbarrier. It waits on the stage's "empty" mbarrier
// before overwriting it. No setmaxnreg: it can share a block with a whole-block phase.
//
// Bindings (pl_bind_bulk_producer, generated from bulk_producer.toml): N, tile, chunk, stages,
// ring_arrivals; ring (smem offset); full, empty (mbarrier offsets); x (pointer).

extern "C" __device__ void bulk_producer_load(pl_ctx ctx, pl_bind_bulk_producer b) {
  if (ctx.thread != 0) return;  // one thread issues every copy; the warp's other lanes idle
  const int chunks = b.tile / b.chunk;
  const unsigned stage_bytes = b.chunk * 4u;  // equal to the full barriers' tx_bytes
  const uint32_t ring = pl_smem_addr(ctx.smem + b.ring);
  const float* src = b.x + static_cast<long long>(ctx.tile) * b.tile;
  for (int c = 0; c < chunks; ++c) {
    const int n = ctx.iter * chunks + c;  // position in this block's stream of stages
    const int stage = n % b.stages;
    // A fresh barrier counts as having completed the phase before phase 0: waiting on parity
    // (phase ^ 1) lets the first pass over the ring through.
    pl_mbar_wait(pl_mbar(ctx, b.empty, stage), ((n / b.stages) & 1) ^ 1);
    const uint32_t full = pl_mbar(ctx, b.full, stage);
    pl_mbar_arrive_expect_tx(full, stage_bytes);
    pl_bulk_g2s(ring + stage * stage_bytes, src + c * b.chunk, stage_bytes, full);
  }
}

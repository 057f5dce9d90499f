// ring_producer: one thread streams row-tiles of a row-major fp32 matrix X[M, K] into a
// shared-memory ring with the TMA engine: one 2-D tensor copy (cp.async.bulk.tensor.2d) per
// stage moves a whole box of box_rows x box_cols floats, and completes the stage's bytes on its
// "full" mbarrier. It waits on the stage's "empty" mbarrier before overwriting it.
//
// The box has no swizzle: TMA writes it row-major, box_cols floats per row, which is the ring
// port's layout in the contract. The box shape is a link-time fact (the consumer states it), so
// this one package feeds consumers of any tile shape the box limits allow.
//
// Bindings (pl_bind_ring_producer, generated from ring_producer.toml): M, K, box_rows, box_cols,
// stages, ring_arrivals; ring (smem offset); full, empty (mbarrier offsets); x (tensor map).

extern "C" __device__ void ring_producer_load(pl_ctx ctx, pl_bind_ring_producer b) {
  if (ctx.thread != 0) return;  // one thread issues every copy; the warp's other lanes idle
  if (ctx.iter == 0) pl_tma_prefetch_map(b.x);  // keep the descriptor fetch off the first copy's path
  const int k_boxes = b.K / b.box_cols;
  const unsigned stage_bytes = b.box_rows * b.box_cols * 4u;  // equal to the full barriers' tx_bytes
  const uint32_t ring = pl_smem_addr(ctx.smem + b.ring);
  for (int c = 0; c < k_boxes; ++c) {
    const int n = ctx.iter * k_boxes + c;  // position in this block's stream of stages
    const int stage = n % b.stages;
    // A fresh barrier counts as having completed the phase before phase 0, so waiting on
    // parity (phase ^ 1) lets the first pass over the ring through.
    pl_mbar_wait(pl_mbar(ctx, b.empty, stage), ((n / b.stages) & 1) ^ 1);
    const uint32_t full = pl_mbar(ctx, b.full, stage);
    pl_mbar_arrive_expect_tx(full, stage_bytes);
    pl_tma_load_2d(ring + stage * stage_bytes, b.x, c * b.box_cols, ctx.tile_row * b.box_rows, full);
  }
}

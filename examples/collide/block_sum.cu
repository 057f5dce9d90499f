// block_sum: per tile of 128 consecutive elements of x, a shared-memory tree reduction across
// the role's 128 threads, synchronized on one named barrier. Written as a stand-alone part:
// its author assumed barrier ID 1 and scratch at smem offset 0 (see block_sum.toml defaults).
extern "C" __device__ void block_sum_tile(pl_ctx ctx, pl_bind_block_sum b) {
  float* scratch = reinterpret_cast<float*>(ctx.smem + b.scratch);
  const int i = ctx.thread;
  pl_bar_sync(b.sync, 128);  // the previous tile's readers are done with the scratch
  scratch[i] = b.x[ctx.tile * 128 + i];
  for (int width = 64; width > 0; width >>= 1) {
    pl_bar_sync(b.sync, 128);
    if (i < width) scratch[i] += scratch[i + width];
  }
  pl_bar_sync(b.sync, 128);
  if (i == 0) b.out[ctx.tile] = scratch[0];
}

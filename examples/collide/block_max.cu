// block_max: like block_sum but a max-reduction, written by another author who made the same
// assumptions: barrier ID 1, scratch at smem offset 0.
extern "C" __device__ void block_max_tile(pl_ctx ctx, pl_bind_block_max b) {
  float* scratch = reinterpret_cast<float*>(ctx.smem + b.scratch);
  const int i = ctx.thread;
  pl_bar_sync(b.sync, 128);
  scratch[i] = b.x[ctx.tile * 128 + i];
  for (int width = 64; width > 0; width >>= 1) {
    pl_bar_sync(b.sync, 128);
    if (i < width) scratch[i] = fmaxf(scratch[i], scratch[i + width]);
  }
  pl_bar_sync(b.sync, 128);
  if (i == 0) b.out[ctx.tile] = scratch[0];
}

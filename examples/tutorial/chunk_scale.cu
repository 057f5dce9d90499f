// chunk_scale (docs/tutorial.md, step 2): for each chunk of this tile, wait until the producer has filled its ring
// stage (the stage's "full" mbarrier), write 2 * x to y, then free the stage (one arrival per warp on "empty").
// ctx.iter counts this block's earlier tiles: with it, n is this chunk's place in the block's stream of stages.

extern "C" __device__ void chunk_scale_tile(pl_ctx ctx, pl_bind_chunk_scale b) {
  const int chunks = b.tile / b.chunk;
  const float* ring = reinterpret_cast<const float*>(ctx.smem + b.ring);
  float* out = b.y + static_cast<long long>(ctx.tile) * b.tile;
  for (int c = 0; c < chunks; ++c) {
    const int n = ctx.iter * chunks + c;
    const int stage = n % b.stages;
    pl_mbar_wait(pl_mbar(ctx, b.full, stage), (n / b.stages) & 1);  // the stage's bytes have landed
    const float* x = ring + stage * b.chunk;
    for (int i = ctx.thread; i < b.chunk; i += pl_facts::work_threads) out[c * b.chunk + i] = 2.0f * x[i];
    __syncwarp();  // every lane's reads of the stage before lane 0 frees it
    if (ctx.thread % 32 == 0) pl_mbar_arrive(pl_mbar(ctx, b.empty, stage));
  }
}

// tmem_drain: y = 2 x, from the filler's tensor-memory tile (the in-port `t`: b.t is its address), slot i % 2.
extern "C" __device__ void tmem_drain_tile(pl_ctx ctx, pl_bind_tmem_drain b) {
  const int slot = ctx.iter % 2;
  const int warp = ctx.thread / 32;
  pl_mbar_wait(pl_mbar(ctx, b.full, slot), (ctx.iter / 2) & 1);
  asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
  float* row = b.y + (static_cast<long long>(ctx.tile) * 128 + ctx.thread) * b.cols;
  const unsigned at = b.t + (static_cast<unsigned>(32 * (warp % 4)) << 16) + slot * b.cols;
  for (int c = 0; c < b.cols; ++c) {
    unsigned v;
    asm volatile("tcgen05.ld.sync.aligned.32x32b.x1.b32 {%0}, [%1];" : "=r"(v) : "r"(at + c) : "memory");
    asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory");
    row[c] = 2.0f * __uint_as_float(v);
  }
  asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
  __syncwarp();
  if (ctx.thread % 32 == 0) pl_mbar_arrive(pl_mbar(ctx, b.empty, slot));
}

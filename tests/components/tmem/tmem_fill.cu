// tmem_fill: tile i of x (128 rows x cols, row-major) into tensor memory, row r in lane r, slot i % 2 of the
// [[tmem]] buffer `tile`; the reader is told on `full` and frees the slot on `empty`.
extern "C" __device__ void tmem_fill_tile(pl_ctx ctx, pl_bind_tmem_fill b) {
  const int slot = ctx.iter % 2;
  const int warp = ctx.thread / 32;
  // A fresh mbarrier counts as having completed the phase before phase 0: the first pass goes through.
  pl_mbar_wait(pl_mbar(ctx, b.empty, slot), ((ctx.iter / 2) & 1) ^ 1);
  asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
  const float* row = b.x + (static_cast<long long>(ctx.tile) * 128 + ctx.thread) * b.cols;
  // 32x32b: the warp writes one column of its 32 lanes; the address names the warp's first lane
  const unsigned at = b.tile + (static_cast<unsigned>(32 * (warp % 4)) << 16) + slot * b.cols;
  for (int c = 0; c < b.cols; ++c) {
    const float v = row[c];
    asm volatile("tcgen05.st.sync.aligned.32x32b.x1.b32 [%0], {%1};" :: "r"(at + c), "f"(v) : "memory");
  }
  asm volatile("tcgen05.wait::st.sync.aligned;" ::: "memory");
  asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
  __syncwarp();
  if (ctx.thread % 32 == 0) pl_mbar_arrive(pl_mbar(ctx, b.full, slot));
}

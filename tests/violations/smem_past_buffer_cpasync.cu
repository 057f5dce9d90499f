// Violation: a cp.async (LDGSTS) lands 16 bytes past the end of the 1 KB buffer: 64 threads copy its 64 pieces of
// 16 bytes, and one thread a 65th, onto whatever the block keeps next to it (the glue's mbarrier slots here).
extern "C" __device__ void v_run(pl_ctx ctx, pl_bind_v b) {
  const uint32_t buf = pl_smem_addr(ctx.smem + b.buf);
  if (ctx.thread < 64)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(buf + 16 * ctx.thread), "l"(b.in + 4 * ctx.thread)
                 : "memory");
  if (ctx.thread == 0) asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(buf + 1024), "l"(b.in) : "memory");
  asm volatile("cp.async.wait_all;" ::: "memory");
  pl_bar_sync(b.sync, 128);
  b.out[ctx.tile * 128 + ctx.thread] = reinterpret_cast<const float*>(ctx.smem + b.buf)[ctx.thread];
  pl_bar_sync(b.sync, 128);
}

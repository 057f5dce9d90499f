// Violation: a hard-coded named barrier ID (5) that the contract neither declares nor reserves.
extern "C" __device__ void v_run(pl_ctx ctx, pl_bind_v b) {
  b.out[ctx.tile * 128 + ctx.thread] = 1.f;
  asm volatile("bar.sync 5, 128;" ::: "memory");
}

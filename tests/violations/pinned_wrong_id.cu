// Violation: the contract pins barrier 3, the code uses 4.
extern "C" __device__ void v_run(pl_ctx ctx, pl_bind_v b) {
  asm volatile("bar.sync 4, 128;" ::: "memory");
  b.out[ctx.tile * 128 + ctx.thread] = 1.f;
}

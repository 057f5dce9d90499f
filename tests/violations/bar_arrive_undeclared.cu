// Violation: bar.arrive on a barrier ID (9) nobody declared.
extern "C" __device__ void v_run(pl_ctx ctx, pl_bind_v b) {
  asm volatile("bar.arrive 9, 128;" ::: "memory");
  b.out[ctx.tile * 128 + ctx.thread] = 1.f;
}

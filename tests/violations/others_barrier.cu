// Violation: uses barrier 2, which another component (tile_store-like, pinning 1..7) reserved.
extern "C" __device__ void v_run(pl_ctx ctx, pl_bind_v b) {
  asm volatile("bar.sync 2, 128;" ::: "memory");
  b.out[ctx.tile * 128 + ctx.thread] = 1.f;
}

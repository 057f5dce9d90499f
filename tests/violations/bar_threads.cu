// Violation: syncs 64 threads on its declared barrier, which the contract says has 128.
extern "C" __device__ void v_run(pl_ctx ctx, pl_bind_v b) {
  if (ctx.thread < 64) pl_bar_sync(b.sync, 64);
  b.out[ctx.tile * 128 + ctx.thread] = 1.f;
}

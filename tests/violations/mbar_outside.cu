// Violation: arrives on mbarrier slot 3 of an array the contract declares with one slot.
extern "C" __device__ void v_run(pl_ctx ctx, pl_bind_v b) {
  if (ctx.thread == 0) pl_mbar_arrive(pl_mbar(ctx, b.bar, 3));
  b.out[ctx.tile * 128 + ctx.thread] = 1.f;
}

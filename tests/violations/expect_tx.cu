// Violation: announces 4096 transaction bytes on an mbarrier whose contract declares none.
extern "C" __device__ void v_run(pl_ctx ctx, pl_bind_v b) {
  if (ctx.thread == 0) pl_mbar_arrive_expect_tx(pl_mbar(ctx, b.bar, 0), 4096);
  b.out[ctx.tile * 128 + ctx.thread] = 1.f;
}

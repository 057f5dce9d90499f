// Violation: a cp.async arrival (cp.async.mbarrier.arrive, SASS ARRIVES.LDGSTSBAR) on mbarrier slot 3 of an array
// the contract declares with one slot.
extern "C" __device__ void v_run(pl_ctx ctx, pl_bind_v b) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(pl_mbar(ctx, b.bar, 3)) : "memory");
  b.out[ctx.tile * 128 + ctx.thread] = 1.f;
}

// Violation: arrives on the slot after its own one-slot mbarrier array, where the allocator placed
// the neighbour's mbarrier (a wrong slot index that lands on another component's barrier).
extern "C" __device__ void v_run(pl_ctx ctx, pl_bind_v b) {
  if (ctx.thread == 0) pl_mbar_arrive(pl_mbar(ctx, b.bar, 1));
  b.out[ctx.tile * 128 + ctx.thread] = 1.f;
}

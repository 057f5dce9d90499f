// Violation (post-link): a named barrier whose ID is read at run time, so no binding folds it into
// the BAR instruction (the declared barrier `sync` is used correctly beside it).
extern "C" __device__ void v_run(pl_ctx ctx, pl_bind_v b) {
  const unsigned id = static_cast<unsigned>(b.in[0]);
  b.out[ctx.tile * 128 + ctx.thread] = 1.f;
  pl_bar_sync(b.sync, 128);
  asm volatile("bar.sync %0, 128;" ::"r"(id) : "memory");
}

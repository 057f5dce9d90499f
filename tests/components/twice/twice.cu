// Two instances of this one package in a link (tests/link/test_conform.py): each arrives on and waits for its own
// mbarrier through component.h's helpers, and writes its own buffer through a helper of a header of its own.
#include "twice_helpers.cuh"
extern "C" __device__ void v_run(pl_ctx ctx, pl_bind_v b) {
  stage_one(ctx.smem + b.buf, ctx.thread, b.in[ctx.thread % 1024]);
  pl_mbar_arrive(pl_mbar(ctx, b.bar, 0));
  pl_mbar_wait(pl_mbar(ctx, b.bar, 0), ctx.iter & 1);
  b.out[ctx.tile * 128 + ctx.thread] = reinterpret_cast<const float*>(ctx.smem + b.buf)[(ctx.thread + 1) % 128];
  pl_bar_sync(b.sync, 128);
}

// Violation: __syncthreads() inside one role of a warp-specialized block.
extern "C" __device__ void v_run(pl_ctx ctx, pl_bind_v b) {
  b.out[ctx.tile * 128 + ctx.thread] = 1.f;
  __syncthreads();
}

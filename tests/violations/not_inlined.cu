// Violation: a helper marked noinline stays a real call inside the fused kernel.
__device__ __noinline__ float v_helper(float x) { return x * 2.f + 1.f; }
extern "C" __device__ void v_run(pl_ctx ctx, pl_bind_v b) {
  b.out[ctx.tile * 128 + ctx.thread] = v_helper(static_cast<float>(ctx.thread));
}

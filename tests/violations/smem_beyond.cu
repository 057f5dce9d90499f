// Violation: stores 64 KB past its 1 KB buffer, beyond everything the block allocated.
extern "C" __device__ void v_run(pl_ctx ctx, pl_bind_v b) {
  float* beyond = reinterpret_cast<float*>(ctx.smem + b.buf + 65536);
  if (ctx.thread == 0) beyond[0] = 1.f;
  b.out[ctx.tile * 128 + ctx.thread] = 1.f;
}

// Violation: writes 64 KB past its 1 KB buffer, beyond everything the block allocated.
extern "C" __device__ void v_run(pl_ctx ctx, pl_bind_v b) {
  float* buf = reinterpret_cast<float*>(ctx.smem + b.buf + 65536);
  buf[ctx.thread] = 1.f;
  pl_bar_sync(b.sync, 128);
  b.out[ctx.tile * 128 + ctx.thread] = buf[(ctx.thread + 1) % 128];
}

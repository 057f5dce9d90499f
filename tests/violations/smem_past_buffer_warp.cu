// Violation: lane 0 of each warp writes past the end of its 1 KB buffer, at a word that depends on
// the warp (a run-time index added to a static offset that is already past the end).
extern "C" __device__ void v_run(pl_ctx ctx, pl_bind_v b) {
  float* buf = reinterpret_cast<float*>(ctx.smem + b.buf);
  buf[ctx.thread] = b.in[ctx.thread];
  if (ctx.thread % 32 == 0) buf[256 + ctx.thread / 32] = 1.f;
  pl_bar_sync(b.sync, 128);
  b.out[ctx.tile * 128 + ctx.thread] = buf[(ctx.thread + 1) % 128];
  pl_bar_sync(b.sync, 128);
}

// Dynamic violation: writes 8 floats past its 1 KB buffer at a thread-dependent index, which no
// static check can see. Sanitize mode's canary after the buffer catches it.
extern "C" __device__ void v_run(pl_ctx ctx, pl_bind_v b) {
  float* buf = reinterpret_cast<float*>(ctx.smem + b.buf);
  buf[ctx.thread] = 1.f;
  if (ctx.thread < 8) buf[256 + ctx.thread] = 2.f;  // 256 floats = the whole buffer: this is past its end
  pl_bar_sync(b.sync, 128);
  b.out[ctx.tile * 128 + ctx.thread] = buf[(ctx.thread + 1) % 128];
  pl_bar_sync(b.sync, 128);
}

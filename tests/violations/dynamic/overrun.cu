// Dynamic violation: threads 8..15 write past the end of the 1 KB buffer. The static part of the
// index (248 floats) lies inside the buffer; only the thread's part carries the writes past it,
// which no static check can see. Sanitize mode's canary after the buffer catches it.
extern "C" __device__ void v_run(pl_ctx ctx, pl_bind_v b) {
  float* buf = reinterpret_cast<float*>(ctx.smem + b.buf);
  buf[ctx.thread] = 1.f;
  if (ctx.thread < 16) buf[248 + ctx.thread] = 2.f;  // 256 floats = the whole buffer
  pl_bar_sync(b.sync, 128);
  b.out[ctx.tile * 128 + ctx.thread] = buf[(ctx.thread + 1) % 128];
  pl_bar_sync(b.sync, 128);
}

// Violation: one thread writes 4 bytes past the end of its 1 KB buffer (a static index), onto
// whatever the block keeps next to it: the glue's mbarrier slots, in the seeded link.
extern "C" __device__ void v_run(pl_ctx ctx, pl_bind_v b) {
  float* buf = reinterpret_cast<float*>(ctx.smem + b.buf);
  buf[ctx.thread] = b.in[ctx.thread];
  if (ctx.thread == 0) buf[256] = 1.f;  // 256 floats = the whole buffer: this is its neighbour's first word
  pl_bar_sync(b.sync, 128);
  b.out[ctx.tile * 128 + ctx.thread] = buf[(ctx.thread + 1) % 128];
  pl_bar_sync(b.sync, 128);
}

// Not a violation: the neighbour in a second role of the seeded links (negative case).
extern "C" __device__ void n_run(pl_ctx ctx, pl_bind_n b) {
  float* buf = reinterpret_cast<float*>(ctx.smem + b.buf);
  buf[ctx.thread] = b.in[ctx.thread % 1024];
  pl_bar_sync(b.sync, 128);
  b.out[ctx.tile * 128 + ctx.thread] = buf[(ctx.thread + 1) % 128];
  pl_bar_sync(b.sync, 128);
}

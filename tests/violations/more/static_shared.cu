// Not a violation: a static __shared__ array read and written at a static index far past the
// block's dynamic allocation. Its addresses lie below pl_smem; the static smem check leaves them
// alone (the post-link check counts static smem against the device limit).
extern "C" __device__ void v_run(pl_ctx ctx, pl_bind_v b) {
  __shared__ float table[4096];
  float* buf = reinterpret_cast<float*>(ctx.smem + b.buf);
  table[ctx.thread] = b.in[ctx.thread];
  if (ctx.thread == 0) table[4000] = 3.f;
  buf[ctx.thread] = b.in[ctx.thread + 128];
  pl_bar_sync(b.sync, 128);
  b.out[ctx.tile * 128 + ctx.thread] = table[(ctx.thread + 1) % 128] + buf[(ctx.thread + 3) % 128] + table[4000];
  pl_bar_sync(b.sync, 128);
}

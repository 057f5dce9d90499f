// Violation (post-link): 40 KB of static __shared__ memory that no contract declares. The allocator
// sees only the declared (dynamic) buffers; static + dynamic exceed what the device has.
extern "C" __device__ void v_run(pl_ctx ctx, pl_bind_v b) {
  __shared__ float hidden[10240];
  float* big = reinterpret_cast<float*>(ctx.smem + b.big);
  float* buf = reinterpret_cast<float*>(ctx.smem + b.buf);
  hidden[ctx.thread * 80] = b.in[ctx.thread];
  big[ctx.thread] = b.in[ctx.thread + 128];
  buf[ctx.thread] = b.in[ctx.thread + 256];
  pl_bar_sync(b.sync, 128);
  const int next = (ctx.thread + 1) % 128;
  b.out[ctx.tile * 128 + ctx.thread] = hidden[next * 80] + big[next] + buf[next];
  pl_bar_sync(b.sync, 128);
}

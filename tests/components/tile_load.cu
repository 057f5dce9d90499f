// Test component: loads a 32x32 fp32 tile of x into its smem buffer, row-major.
extern "C" __device__ void tile_load_run(pl_ctx ctx, pl_bind_tile_load b) {
  float* buf = reinterpret_cast<float*>(ctx.smem + b.buf);
  const float* src = b.x + ctx.tile * 1024;
  for (int i = ctx.thread; i < 1024; i += 128) buf[i] = src[i];  // row * 32 + col
}

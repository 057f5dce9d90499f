// Test component: reads a 32x32 tile from smem in ITS layout (column-major, padded to 33) and
// writes 2 * tile to y row-major. Correct output (y == 2x) needs the glue's layout conversion.
extern "C" __device__ void tile_emit_run(pl_ctx ctx, pl_bind_tile_emit b) {
  const float* buf = reinterpret_cast<const float*>(ctx.smem + b.buf);
  float* dst = b.y + ctx.tile * 1024;
  for (int i = ctx.thread; i < 1024; i += 128) {
    const int row = i / 32, col = i % 32;
    dst[i] = 2.f * buf[col * 33 + row];
  }
}

// Violation (warning): a run-time indexed local array forces local memory (spills) in its role.
extern "C" __device__ void v_run(pl_ctx ctx, pl_bind_v b) {
  float local[64];
  for (int i = 0; i < 64; ++i) local[i] = b.in[(ctx.tile * 64 + i) % 1024];
  b.out[ctx.tile * 128 + ctx.thread] = local[(ctx.thread * 7 + ctx.tile) % 64];
}

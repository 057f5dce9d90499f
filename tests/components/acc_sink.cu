// Test component: takes the consumer's register fragment directly (registers -> registers) and
// writes it out; each thread stores its own values, so any fragment layout works here.
extern "C" __device__ void acc_sink_run(pl_ctx ctx, pl_bind_acc_sink b, float (&acc)[32]) {
#pragma unroll
  for (int v = 0; v < 32; ++v) b.out[(ctx.tile * 32 + v) * 256 + ctx.thread] = acc[v];
}

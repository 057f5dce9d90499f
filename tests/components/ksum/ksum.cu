// Test component: the k-tiles ctx.k_begin .. ctx.k_end of tile ctx.tile, summed into the registers
// (x is [tile][k-tile][value][thread]: each thread reads its own values, coalesced).
extern "C" __device__ void ksum_run(pl_ctx ctx, pl_bind_ksum b, float (&acc)[32]) {
#pragma unroll
  for (int v = 0; v < 32; ++v) acc[v] = 0.0f;
  for (int k = ctx.k_begin; k < ctx.k_end; ++k) {
    const float* x = b.x + (static_cast<long long>(ctx.tile) * b.KT + k) * 8192 + ctx.thread;
#pragma unroll
    for (int v = 0; v < 32; ++v) acc[v] += x[v * 256];
  }
}

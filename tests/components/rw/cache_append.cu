// cache_append: cache[L, :] = x, 16 bytes per thread, every block a share of the columns.
extern "C" __device__ void cache_append_row(pl_ctx ctx, pl_bind_cache_append b) {
  const int chunks = b.C / 8;
  for (int c = blockIdx.x * blockDim.x + ctx.thread; c < chunks; c += gridDim.x * blockDim.x)
    *reinterpret_cast<int4*>(b.cache + static_cast<size_t>(b.L) * b.C + 8 * c) =
        *reinterpret_cast<const int4*>(b.x + 8 * c);
}

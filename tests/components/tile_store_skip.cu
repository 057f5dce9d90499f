// Seeded bug for the verify tests: tile_store that never stores tile 5. The poison check must
// count its 128 x 64 elements as unwritten.
#define tile_store_tile tile_store_tile_real
#include "tile_store.cu"  // copied beside this file by tests/conftest.py store_variant
#undef tile_store_tile

extern "C" __device__ void tile_store_tile(pl_ctx ctx, pl_bind_tile_store b) {
  if (ctx.tile == 5) {
    pl_bar_sync(b.done, pl_facts::store_threads);  // keep the barrier count of the real epilogue
    return;
  }
  tile_store_tile_real(ctx, b);
}

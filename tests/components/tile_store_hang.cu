// Seeded hang for the verify tests: tile_store that, on tile 0, waits on an mbarrier nobody
// arrives at. The harness must report `hang` within its timeout, naming the kernel and rung.
#define tile_store_tile tile_store_tile_real
#include "tile_store.cu"  // copied beside this file by tests/conftest.py store_variant
#undef tile_store_tile

extern "C" __device__ void tile_store_tile(pl_ctx ctx, pl_bind_tile_store b) {
  if (ctx.tile == 0) pl_mbar_wait(pl_mbar(ctx, b.never, 0), 0);
  tile_store_tile_real(ctx, b);
}

// cub_sum: sums each tile streamed through an mbarrier ring. In the tile phase every warp of the
// sum role folds its share of each chunk into one float per thread, reduces it across the warp
// with cub::WarpReduce (shuffles) and adds it to its partial in shared memory. In the whole-block
// phase, which every thread of the block runs after the tile loops, cub::BlockReduce sums the
// warps' partials and thread 0 writes the block's total.
//
// cub::BlockReduce synchronizes the whole block with __syncthreads (barrier 0). In a warp-
// specialized block that deadlocks anywhere but in a phase all roles reach: here the entry of
// scope = "block" (cub_sum.toml), which the conformance check allows and only there.
//
// Compile-time facts (pl_facts): sum_threads / sum_warps (the role's size) and block_threads (every
// thread of the block, BlockReduce's BLOCK_DIM_X). Bindings (pl_bind_cub_sum): N, tile, chunk,
// stages, block_threads; ring, partials, warp_scratch, block_scratch (smem offsets); full, empty
// (mbarrier offsets); out (pointer).
#include <cub/block/block_reduce.cuh>
#include <cub/warp/warp_reduce.cuh>

namespace {
constexpr int kThreads = pl_facts::sum_threads;
constexpr int kWarps = pl_facts::sum_warps;
using WarpSum = cub::WarpReduce<float>;
using BlockSum = cub::BlockReduce<float, pl_facts::block_threads>;
static_assert(sizeof(WarpSum::TempStorage) == 1, "cub_sum.toml declares warp_scratch as 1 byte per warp");
static_assert(sizeof(BlockSum::TempStorage) <= 8 * (pl_facts::block_threads / 32) + 16,
              "cub_sum.toml declares block_scratch as 8 * (block_threads / 32) + 16 bytes");
}

extern "C" __device__ void cub_sum_tile(pl_ctx ctx, pl_bind_cub_sum b) {
  float* partials = reinterpret_cast<float*>(ctx.smem + b.partials);
  const int warp = ctx.thread / 32;
  const int lane = ctx.thread % 32;
  const int chunks = b.tile / b.chunk;
  const float4* ring = reinterpret_cast<const float4*>(ctx.smem + b.ring);
  float sum = 0.f;
  for (int c = 0; c < chunks; ++c) {
    const int n = ctx.iter * chunks + c;
    const int stage = n % b.stages;
    pl_mbar_wait(pl_mbar(ctx, b.full, stage), (n / b.stages) & 1);
    const float4* chunk = ring + stage * (b.chunk / 4);
    for (int i = ctx.thread; i < b.chunk / 4; i += kThreads) {
      const float4 x = chunk[i];
      sum += (x.x + x.y) + (x.z + x.w);
    }
    // The producer may overwrite the stage once every warp has arrived: __syncwarp orders the
    // lanes' reads before lane 0's arrive, which has release semantics.
    __syncwarp();
    if (lane == 0) pl_mbar_arrive(pl_mbar(ctx, b.empty, stage));
  }
  auto* scratch = reinterpret_cast<WarpSum::TempStorage*>(ctx.smem + b.warp_scratch);
  const float warp_sum = WarpSum(scratch[warp]).Sum(sum);
  if (lane == 0) partials[warp] = (ctx.iter == 0 ? 0.f : partials[warp]) + warp_sum;
}

extern "C" __device__ void cub_sum_finish(pl_ctx ctx, pl_bind_cub_sum b) {
  const float* partials = reinterpret_cast<const float*>(ctx.smem + b.partials);
  auto& scratch = *reinterpret_cast<BlockSum::TempStorage*>(ctx.smem + b.block_scratch);
  const bool ran = ctx.iter > 0;  // a block beyond the last tile has no partials
  const float total = BlockSum(scratch).Sum(ran && ctx.thread < kWarps ? partials[ctx.thread] : 0.f);
  if (ctx.thread == 0 && ran) b.out[blockIdx.x] = total;
}

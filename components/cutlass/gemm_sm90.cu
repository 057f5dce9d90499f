// gemm_sm90: a stock CUTLASS sm90 GEMM wrapped as a pipelink component.
//
//   D[M, N] = alpha * A[M, K] * B[K, N] + beta * C[M, N]
//   A: bf16 row-major (K-major), B: bf16 column-major (K-major), C and D: bf16 row-major,
//   fp32 accumulation and epilogue compute.
//
// The kernel is exactly what CUTLASS's CollectiveBuilder picks for "sm90, TMA warp-specialized
// cooperative, tile 128x256x64, cluster 1x1x1": one producer warpgroup (TMA loads) and two
// consumer warpgroups (WGMMA + TMA-store epilogue) sharing each 128x256 tile, 384 threads.
// Its purpose here is to give pipelink a component of realistic (CUTLASS-sized) template
// weight, so that packing and linking can be measured on it. The component is opaque in the
// way a vendor binary is: everything it does inside the block (smem layout, mbarriers, named
// barriers, setmaxnreg, tile scheduling) is CUTLASS's business, and the contract only states
// what it occupies so that the linker keeps other components out of its way.
//
// How it maps onto the pipelink ABI:
//   * The whole kernel body is one entry, cutlass_gemm_run, run by a single 12-warp role. The
//     CUTLASS body derives its warpgroup roles from threadIdx.x (not from ctx.thread), so the
//     role must start at warp 0 of the block; with one role in the link that is what happens.
//   * CUTLASS's persistent tile scheduler walks the output tiles itself (blockIdx.x strided by
//     gridDim.x). The glue's own tile loop must therefore call the entry exactly once per block:
//     the link spec makes the glue's tile count equal the grid (one glue "tile" per block).
//   * CUTLASS's Params (problem shape, strides, TMA descriptors, epilogue scalars, scheduler
//     state) is built on the host with GemmKernel::to_underlying_arguments and copied into a
//     device buffer, passed here as the byte operand `params`. In a stock CUTLASS launch Params
//     is a __grid_constant__ kernel parameter; reading it from global memory instead costs a
//     few extra loads at kernel start, which is fine for a packing/linking benchmark. TMA accepts
//     descriptors in global memory (generic address) as long as they were written before the
//     launch; CUtensorMap is alignas(64), so the buffer must be 64-byte aligned (cudaMalloc is).
//   * Shared memory: CUTLASS carves its SharedStorage out of the block's dynamic smem starting
//     at the pointer it is given. We hand it ctx.smem (offset 0 of the block's dynamic smem),
//     and the contract pins the "storage" buffer at offset 0 with 1024-byte alignment, which
//     the 128B-swizzled TMA tiles inside SharedStorage need.
//   * CUTLASS sm90 collectives use named barriers 1..7 with hard-coded IDs (ReservedNamedBarriers
//     in cutlass/arch/barrier.h) and issue setmaxnreg themselves (40 for the producer warpgroup,
//     232 for the consumers), so the contract reserves those barrier IDs and asks for no
//     register budget (the glue must not issue a competing setmaxnreg).
//
// Both sizes the contract states as literals (SharedStorage bytes, Params bytes) are
// static_assert'ed below, so a CUTLASS upgrade that changes them fails the pack instead of
// silently corrupting memory.

// Release build, as CUTLASS's own Release configuration: without NDEBUG, CUTLASS's device-side
// assert()s stay in and each becomes a real call to __assertfail (CALL.ABS.NOINC in SASS),
// which costs registers/stack around the call site and which pipelink's post-link check counts
// as a call that was not inlined. Must come before anything includes <assert.h>.
#ifndef NDEBUG
#define NDEBUG 1
#endif

// CUTLASS is normally built with --expt-relaxed-constexpr; pipelink's fixed pack flags do not
// pass it, so CuTe's host/device tuple helpers warn (#20013, #20015: constexpr __host__ lambda
// called from __host__ __device__ code) on every compile-time shape computation. Those calls are
// all constant-folded (static shapes), so nothing host-only reaches device code (an unresolved
// host symbol would fail the nvJitLink link); silence the flood so real diagnostics stay visible.
#pragma nv_diag_suppress 20013
#pragma nv_diag_suppress 20015

#include <cute/tensor.hpp>

#include <cutlass/cutlass.h>
#include <cutlass/bfloat16.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/gemm.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

namespace pl_cutlass_gemm {

using namespace cute;

using ElementA = cutlass::bfloat16_t;
using ElementB = cutlass::bfloat16_t;
using ElementC = cutlass::bfloat16_t;
using ElementD = cutlass::bfloat16_t;
using ElementAccumulator = float;
using ElementCompute = float;

using LayoutA = cutlass::layout::RowMajor;     // K-major A
using LayoutB = cutlass::layout::ColumnMajor;  // K-major B: both operands feed WGMMA from smem as-is
using LayoutC = cutlass::layout::RowMajor;
using LayoutD = cutlass::layout::RowMajor;

// 16-byte global accesses: TMA needs 16-byte aligned row pitches.
constexpr int AlignmentA = 128 / cutlass::sizeof_bits<ElementA>::value;
constexpr int AlignmentB = 128 / cutlass::sizeof_bits<ElementB>::value;
constexpr int AlignmentC = 128 / cutlass::sizeof_bits<ElementC>::value;
constexpr int AlignmentD = 128 / cutlass::sizeof_bits<ElementD>::value;

using TileShape = Shape<_128, _256, _64>;
using ClusterShape = Shape<_1, _1, _1>;  // no multicast: the glue launches without a cluster attribute

using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;

// The epilogue is built first because the mainloop's stage count is whatever fits in the
// remaining shared memory once the epilogue's smem is carved out.
using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto,
    ElementAccumulator, ElementCompute,
    ElementC, LayoutC, AlignmentC,
    ElementD, LayoutD, AlignmentD,
    EpilogueSchedule>::CollectiveOp;

using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    ElementA, LayoutA, AlignmentA,
    ElementB, LayoutB, AlignmentB,
    ElementAccumulator,
    TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<
        static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
    KernelSchedule>::CollectiveOp;

// Problem shape (M, N, K, L): L is the batch count. Default tile scheduler: CUTLASS's
// persistent scheduler, which strides over output tiles by gridDim.x on its own.
using GemmKernel = cutlass::gemm::kernel::GemmUniversal<
    Shape<int, int, int, int>,
    CollectiveMainloop,
    CollectiveEpilogue>;

using Params = typename GemmKernel::Params;

// The contract's numbers, checked against the compiled types. storage: the contract's
// [[smem]] "storage" bytes; Params: the contract's params_bytes (a compile-time fact, so the
// contract value itself is what is compared).
constexpr int kContractStorageBytes = 230400;
static_assert(GemmKernel::SharedStorageSize <= kContractStorageBytes,
              "CUTLASS SharedStorage grew: update [[smem]] storage.bytes in gemm_sm90.toml");
static_assert(sizeof(Params) == pl_facts::params_bytes,
              "CUTLASS Params changed size: update facts.requires.params_bytes in gemm_sm90.toml");
static_assert(GemmKernel::MaxThreadsPerBlock == pl_facts::gemm_threads,
              "the cooperative kernel's block size must equal the 'gemm' role (roles.gemm.warps)");
static_assert(GemmKernel::MinBlocksPerMultiprocessor == 1,
              "the glue is built with __launch_bounds__(threads, 1)");
static_assert(alignof(Params) <= 256, "Params must fit the alignment of a cudaMalloc'ed buffer");

}  // namespace pl_cutlass_gemm

// Entry: runs CUTLASS's kernel body for this block. Called once per block by the glue (see the
// link spec); CUTLASS's scheduler then loops over output tiles inside. ctx.tile/tile_row/
// tile_col/iter are deliberately unused: the tile order belongs to CUTLASS, not to the glue.
//
// Plain extern "C" __device__ (not inline, not static) so the symbol stays defined in the
// LTO-IR for nvJitLink to resolve against the glue's declaration.
extern "C" __device__ void cutlass_gemm_run(pl_ctx ctx, pl_bind_gemm_sm90 b) {
  using namespace pl_cutlass_gemm;
  const Params& params = *reinterpret_cast<const Params*>(b.params);
  GemmKernel gemm;
  gemm(params, reinterpret_cast<char*>(ctx.smem));
}

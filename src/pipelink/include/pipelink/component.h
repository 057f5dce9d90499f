// pipelink component ABI (sm_90a). Include this from every component and from the glue.
//
// A component exposes one `extern "C" __device__` function per role and phase:
//     extern "C" __device__ void my_entry(pl_ctx ctx, pl_bind_<component> b, <register ports...>);
// When a package is made, pipelink force-includes this header, the bindings struct generated from
// the contract (`pl_bind_<component>`: one field per link-time fact, smem buffer offset, mbarrier
// offset, named barrier ID and operand pointer) and the compile-time facts (`namespace pl_facts`:
// compile-time facts and each role's size, `<role>_warps` and `<role>_threads`). The glue fills
// the bindings with literal constants, which nvJitLink LTO folds into immediates.
// docs/component_api.md is generated from the comments in this file (docs/generate_component_api.py):
// a comment directly above a declaration documents it.
#pragma once
#include <stdint.h>

// ---- The call ----

// What the glue tells a component about the current call. In a whole-block phase ([[entry]]
// scope = "block", once per block after the tile loops) there is no tile: tile, tile_row and
// tile_col are -1, iter counts the tiles the block ran, and thread is threadIdx.x.
struct pl_ctx {
  unsigned char* smem;  // dynamic shared memory base (every offset in the bindings is from here)
  int tile;             // linear tile index in the agreed schedule
  int tile_row;         // tile coordinates in that schedule
  int tile_col;
  int iter;             // tiles this role has processed before this one, in this block
  int thread;           // thread index within the role (0 .. role threads - 1)
};

// How every helper below is declared: each unit gets its own inlined copy, so components packed
// separately never clash on a symbol.
#define PL_DEVICE static __device__ __forceinline__

// The 32-bit shared-memory address of a pointer into shared memory (ctx.smem + offset), the form
// mbarrier, bulk-copy and TMA instructions take.
PL_DEVICE uint32_t pl_smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mbarriers ----
// An [[mbarrier]] array is `count` 8-byte barriers at a byte offset the bindings hold (b.<name>).
// The glue initializes every one with the contract's arrival count before any component runs.

// The address of slot `slot` of the mbarrier array at byte offset `off` (b.<name>).
PL_DEVICE uint32_t pl_mbar(const pl_ctx& ctx, unsigned off, int slot) {
  return pl_smem_addr(ctx.smem + off + 8 * slot);
}
// Initializes the mbarrier at `bar` to expect `arrivals` arrivals per phase. The glue's job: in a
// component it is a conformance error (a second init resets the phase), except on mbarriers kept
// inside one of its own buffers named under [reserve] mbarriers_in.
PL_DEVICE void pl_mbar_init(uint32_t bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}
// Makes the mbarrier initializations before it visible to the cluster and to the TMA engine; the
// glue issues it after its initializations.
PL_DEVICE void pl_mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// Arrives once on `bar`, with release semantics: this thread's shared-memory accesses before it are
// visible to the threads that wait for the phase.
PL_DEVICE void pl_mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Arrives once on `bar` and announces `bytes` transaction bytes, which copies (pl_bulk_g2s,
// pl_tma_load_2d) complete on it. A constant `bytes` is checked against the mbarrier's tx_bytes.
PL_DEVICE void pl_mbar_arrive_expect_tx(uint32_t bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
// Whether the phase of `bar` with parity `parity` has completed: one test, which the hardware may
// hold for a while before it answers no.
PL_DEVICE bool pl_mbar_try_wait(uint32_t bar, unsigned parity) {
  uint32_t ok;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
      : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
  return ok != 0;
}
#ifndef PL_SANITIZE
// Waits until the phase of `bar` with parity `parity` has completed, with acquire semantics. A
// fresh mbarrier counts as having completed the phase before phase 0: waiting on parity 1 returns
// at once (how a producer lets the first pass over a ring through).
PL_DEVICE void pl_mbar_wait(uint32_t bar, unsigned parity) {
  while (!pl_mbar_try_wait(bar, parity)) {
  }
}
#else
// Sanitize builds (pipelink link --sanitize recompiles open components with PL_SANITIZE): the glue
// defines this function (it owns the report buffer); it reports the barrier a thread waited on for
// 2 s without a phase change, and traps.
extern "C" __device__ void pl_sanitize_stuck(uint32_t bar, unsigned parity);
// Sanitize builds: nanoseconds from %globaltimer, the clock of the bounded wait.
PL_DEVICE unsigned long long pl_sanitize_clock() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}
// Sanitize builds: the same wait, bounded: after 2 s without the phase it calls pl_sanitize_stuck,
// which reports and traps instead of hanging.
PL_DEVICE void pl_mbar_wait(uint32_t bar, unsigned parity) {
  const unsigned long long start = pl_sanitize_clock();
  while (!pl_mbar_try_wait(bar, parity)) {
    if (pl_sanitize_clock() - start > 2000000000ull) pl_sanitize_stuck(bar, parity);
  }
}
#endif

// ---- Bulk copies ----
// The TMA engine's 1-D form: no tensor map needed.

// Copies `bytes` (a multiple of 16, both addresses 16-byte aligned) from global `src` to shared
// memory at `dst`, and completes `bytes` transaction bytes on the mbarrier `bar`.
PL_DEVICE void pl_bulk_g2s(uint32_t dst, const void* src, unsigned bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

// ---- Tensor copies ----
// The TMA engine with a tensor map: [[operand]] tma in the contract.

// A CUtensorMap's 128 opaque bytes. The runtime encodes it from the caller's array at launch
// (cuTensorMapEncodeTiled) into the kernel's `__grid_constant__` parameter struct; bindings hold a
// pointer to it, which is the parameter-space address the TMA instructions want.
struct alignas(64) pl_tensor_map {
  unsigned long long opaque[16];
};
// Copies one box of a 2-D tensor map to shared memory at `dst` (aligned as the swizzle needs:
// 1024 bytes for 128B swizzle); c0 is the innermost coordinate (elements), c1 the row. Completes
// the box's bytes on mbarrier `bar`.
PL_DEVICE void pl_tma_load_2d(uint32_t dst, const pl_tensor_map* map, int c0, int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
// Copies one box from shared memory at `src` to the 2-D tensor map at (c0, c1), as a bulk async-group
// of the issuing thread. Writers of `src` must have run pl_fence_proxy_async() and synchronized with
// the issuing thread first.
PL_DEVICE void pl_tma_store_2d(const pl_tensor_map* map, uint32_t src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
               ::"l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(src) : "memory");
}
// Closes the issuing thread's bulk async-group: the pl_tma_store_2d copies since the last commit,
// which pl_bulk_wait_read then waits for.
PL_DEVICE void pl_bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Waits until the issuing thread's bulk groups have finished reading shared memory (the writes to
// global memory may still be in flight): the source buffer may then be reused.
PL_DEVICE void pl_bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
// Warms the tensor map's cache line (descriptor fetches otherwise sit on the first copy's path).
PL_DEVICE void pl_tma_prefetch_map(const pl_tensor_map* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// ---- Thread-block clusters ----
// [launch] cluster in the link spec; a component that needs one requires the fact cluster_ctas.

// This block's rank in its cluster (0 .. cluster_ctas - 1).
PL_DEVICE unsigned pl_cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
// Every thread of every block of the cluster (release / acquire: smem writes and mbarrier inits
// before it are visible to the peers after it).
PL_DEVICE void pl_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// Arrive on the mbarrier at the same smem address in block `rank` of the cluster.
PL_DEVICE void pl_mbar_arrive_cluster(uint32_t bar, unsigned rank) {
  asm volatile(
      "{\n .reg .b32 remote;\n mapa.shared::cluster.u32 remote, %0, %1;\n"
      " mbarrier.arrive.shared::cluster.b64 _, [remote];\n}" ::"r"(bar), "r"(rank) : "memory");
}
// pl_tma_load_2d, delivered to the same smem offset in every block of `mask` (bit i = rank i), each
// completing the bytes on its own mbarrier at offset `bar`.
PL_DEVICE void pl_tma_load_2d_multicast(uint32_t dst, const pl_tensor_map* map, int c0, int c1, uint32_t bar,
                                        uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3}], [%4], %5;"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(mask) : "memory");
}

// ---- Named barriers ----
// IDs 1..15 (0 is `__syncthreads`). Take the ID from the bindings (b.<name>) so that the linker can
// place it, and pass the contract's thread count (a multiple of 32): the conformance check
// compares both with the contract.

// Waits until `threads` threads, this one included, have arrived at barrier `id`; their shared-
// memory accesses before it are visible after it.
PL_DEVICE void pl_bar_sync(unsigned id, unsigned threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// Arrives at barrier `id` without waiting: the producer side of a hand-over whose consumers
// pl_bar_sync with the same thread count.
PL_DEVICE void pl_bar_arrive(unsigned id, unsigned threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// ---- Register budgets ----
// setmaxnreg acts on a whole warpgroup and needs `__launch_bounds__(threads, 1)` on the kernel (the
// glue's). The glue sets each role's `registers`; a component that manages its own warpgroups lists
// its values under the role's internal_setmaxnreg.

// Raises this warpgroup's per-thread register budget to N, waiting until the block has them free.
template <int N>
PL_DEVICE void pl_setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N)); }
// Lowers this warpgroup's per-thread register budget to N, releasing the rest to the block.
template <int N>
PL_DEVICE void pl_setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N)); }

// ---- Proxies and lanes ----

// Orders this thread's generic-proxy shared-memory writes before later async-proxy reads of them
// (pl_tma_store_2d, WGMMA operands).
PL_DEVICE void pl_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// This thread's lane in its warp (0..31).
PL_DEVICE int pl_lane() { return threadIdx.x & 31; }

// pipelink component ABI (sm_90a). Include this from every component and from the glue.
//
// A component exposes one `extern "C" __device__` function per role and phase:
//     extern "C" __device__ void my_entry(pl_ctx ctx, pl_bind_<component> b, <register ports...>);
// `pl_bind_<component>` is generated from the contract when the package is made (see
// pipelink/bind.h, included through PIPELINK_BIND_HEADER). The glue fills it with literal
// constants (smem offsets, barrier IDs, facts), which nvJitLink LTO folds into immediates.
// Helpers below are `static __forceinline__`: each unit gets its own copy, no symbol clashes.
#pragma once
#include <stdint.h>

// What the glue tells a component about the current call.
struct pl_ctx {
  unsigned char* smem;  // dynamic shared memory base (every offset in the bindings is from here)
  int tile;             // linear tile index in the agreed schedule
  int tile_row;         // tile coordinates in that schedule
  int tile_col;
  int iter;             // tiles this role has processed before this one, in this block
  int thread;           // thread index within the role (0 .. role threads - 1)
};

#define PL_DEVICE static __device__ __forceinline__

PL_DEVICE uint32_t pl_smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mbarriers (an array of `count` 8-byte barriers at byte offset `off`) ----
PL_DEVICE uint32_t pl_mbar(const pl_ctx& ctx, unsigned off, int slot) {
  return pl_smem_addr(ctx.smem + off + 8 * slot);
}
PL_DEVICE void pl_mbar_init(uint32_t bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}
PL_DEVICE void pl_mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
PL_DEVICE void pl_mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
PL_DEVICE void pl_mbar_arrive_expect_tx(uint32_t bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
PL_DEVICE bool pl_mbar_try_wait(uint32_t bar, unsigned parity) {
  uint32_t ok;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
      : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
  return ok != 0;
}
#ifdef PL_SANITIZE
// Sanitize builds (pipelink link --sanitize recompiles open components with PL_SANITIZE): a wait
// that sees no phase change for 2 s reports the barrier and traps instead of hanging. The glue
// defines pl_sanitize_stuck (it owns the report buffer).
extern "C" __device__ void pl_sanitize_stuck(uint32_t bar, unsigned parity);
PL_DEVICE unsigned long long pl_sanitize_clock() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}
PL_DEVICE void pl_mbar_wait(uint32_t bar, unsigned parity) {
  const unsigned long long start = pl_sanitize_clock();
  while (!pl_mbar_try_wait(bar, parity)) {
    if (pl_sanitize_clock() - start > 2000000000ull) pl_sanitize_stuck(bar, parity);
  }
}
#else
PL_DEVICE void pl_mbar_wait(uint32_t bar, unsigned parity) {
  while (!pl_mbar_try_wait(bar, parity)) {
  }
}
#endif

// ---- bulk copies (the TMA engine, 1-D form: no tensor map needed) ----
// Copies `bytes` (multiple of 16, both addresses 16-byte aligned) and completes `bytes`
// transaction bytes on the mbarrier.
PL_DEVICE void pl_bulk_g2s(uint32_t dst, const void* src, unsigned bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

// ---- tensor copies (the TMA engine with a tensor map) ----
// A CUtensorMap's 128 opaque bytes. The runtime encodes it from the caller's array at launch
// (cuTensorMapEncodeTiled) into the kernel's __grid_constant__ parameter struct; bindings hold a
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
PL_DEVICE void pl_bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Waits until the issuing thread's bulk groups have finished reading shared memory (the writes to
// global memory may still be in flight): the source buffer may then be reused.
PL_DEVICE void pl_bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
// Warms the tensor map's cache line (descriptor fetches otherwise sit on the first copy's path).
PL_DEVICE void pl_tma_prefetch_map(const pl_tensor_map* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// ---- thread-block clusters ----
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

// ---- named barriers (IDs 1..15; 0 is __syncthreads) ----
PL_DEVICE void pl_bar_sync(unsigned id, unsigned threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
PL_DEVICE void pl_bar_arrive(unsigned id, unsigned threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// ---- register budgets (warpgroup-wide; needs __launch_bounds__(threads, 1) on the kernel) ----
template <int N>
PL_DEVICE void pl_setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N)); }
template <int N>
PL_DEVICE void pl_setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N)); }

// ---- ordering between generic-proxy writes and async-proxy (TMA/WGMMA) reads ----
PL_DEVICE void pl_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

PL_DEVICE int pl_lane() { return threadIdx.x & 31; }

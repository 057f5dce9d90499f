"""The generated glue text, compiled for the CPU and run: what the model (link/glue_model.py) checks on the
glue's statements, checked here on what `render` prints from them, so that a template that prints a
different C meaning than its fields (the count completing one k-tile early, a count never set back)
cannot pass the CPU suite.

A split link of the toy additive mainloop (tests/components/ksum: a tile's value is the sum of its
k-tiles) is planned, its glue text compiled by nvcc as host C++ with its two components' real sources,
against a shim of the CUDA qualifiers, and run block after block, in several orders, launch after launch:
any order of whole blocks is one a GPU may take, since a stream-K block never waits for another. Only
thread 0 of the role runs: the count, the slot choice and the contributor sum are all decided by
thread 0 or per thread on its own values. Partial slots are poisoned before each launch and the tile
counts cleared before the first only, as the runtime does; after every block each tile's output is
either untouched or its exact sum."""

from __future__ import annotations

import random
import re
import subprocess

import pytest

from conftest import ROOT
from glue_cases import ksum_packages, ksum_plan
from pipelink import bindgen
from pipelink.backend.toolchain import find_nvcc
from pipelink.link import glue_ir as ir
from pipelink.link.glue import bind_header_name

COMPONENT_H = ROOT / "src" / "pipelink" / "include" / "pipelink" / "component.h"
SOURCES = (ROOT / "tests" / "components" / "ksum" / "ksum.cu", ROOT / "tests" / "components" / "acc_sink.cu")

# The glue's own helpers that are PTX (asm): their meaning on one thread, written for the host.
HOST_HELPERS = {
    "pl_split_count": "static inline int pl_split_count(int* count, int n) { int old = *count; *count += n; return old; }",
    "pl_bar_or": "static inline int pl_bar_or(unsigned, unsigned, int pred) { return pred != 0; }",
}

SHIM = """#pragma once
#include <stdint.h>
#define __device__
#define __global__
#define __constant__
#define __shared__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__
#define __align__(n)
#define PL_DEVICE static inline
struct pl_dim3 { unsigned x, y, z; };
static pl_dim3 threadIdx, blockIdx;
unsigned char pl_smem[1 << 18];
template <class A, class B> auto min(A a, B b) -> decltype(a + b) { return a < b ? a : b; }
template <class A, class B> auto max(A a, B b) -> decltype(a + b) { return a < b ? b : a; }
static inline void __syncthreads() {}
static inline void pl_bar_sync(unsigned, unsigned) {}  // one thread runs: nothing to wait for
"""

MAIN = r"""
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
// stdin: M_TILES KT GRID LAUNCHES, then each launch's block order. x[tile][k][v][thread] is an integer, so
// every sum is exact; out[tile][v][thread] is checked for thread 0.
int main() {
  int tiles, kt, grid, launches;
  if (scanf("%d %d %d %d", &tiles, &kt, &grid, &launches) != 4) return 3;
  // one tile more of each: a tile past the last one is read from there and must never be stored
  std::vector<float> x((size_t)(tiles + 1) * kt * 8192), out((size_t)(tiles + 1) * 8192);
  std::vector<float> parts((size_t)grid * 2 * 8192);
  std::vector<int> counts(tiles + 1, 0);  // cleared before the first launch only (zero_once)
  for (size_t i = 0; i < x.size(); ++i) x[i] = (float)((i / 8192) % 97 + i % 8192 % 5);
  PARAMS p;
  p.mainloop_x = x.data(); p.sink_out = out.data();
#ifdef SPLIT
  p.glue_partials = reinterpret_cast<unsigned char*>(parts.data());
  p.glue_tile_counts = reinterpret_cast<unsigned char*>(counts.data());
#endif
  for (int l = 0; l < launches; ++l) {
    for (auto& v : out) v = NAN;
    for (auto& v : parts) v = 1e30f;  // a slot read before this launch stored it
    for (int i = 0; i < grid; ++i) {
      int b;
      if (scanf("%d", &b) != 1) return 3;
      blockIdx.x = b; threadIdx.x = 0;
      KERNEL(p);
      for (int t = 0; t < tiles; ++t)
        for (int v = 0; v < 32; ++v) {
          float want = 0.0f;
          for (int k = 0; k < kt; ++k) want += x[((size_t)t * kt + k) * 8192 + v * 256];
          float got = out[((size_t)t * 32 + v) * 256];
          if (!std::isnan(got) && got != want) {
            printf("launch %d: after block %d, tile %d value %d is %g, not its sum %g\n", l, b, t, v, got, want);
            return 1;
          }
          if (!std::isnan(out[((size_t)tiles * 32 + v) * 256])) {
            printf("launch %d: block %d stored tile %d, past the last\n", l, b, tiles);
            return 1;
          }
          if (i == grid - 1 && std::isnan(got)) {
            printf("launch %d: tile %d was never stored\n", l, t);
            return 1;
          }
        }
    }
  }
  printf("ok\n");
  return 0;
}
"""


def _host_glue(text: str) -> str:
    """The glue without its includes and its PTX helpers (HOST_HELPERS stand in)."""
    text = re.sub(r"^#include .*$", "", text, flags=re.M)
    dropped = []

    def drop(m: re.Match) -> str:
        if "asm" not in m.group(0):
            return m.group(0)
        dropped.append(m.group(1))
        return HOST_HELPERS.get(m.group(1), m.group(0))
    text = re.sub(r"^static __device__ __forceinline__ \w+ (\w+)\(.*?^}\n", drop, text, flags=re.M | re.S)
    unknown = set(dropped) - set(HOST_HELPERS)
    assert not unknown, f"PTX helpers without a host version: {unknown}"
    return text


def _run_on_host(tmp_path, plan, kt: int, orders: list[list[int]]) -> subprocess.CompletedProcess:
    inc = tmp_path / "include"
    (inc / "pipelink").mkdir(parents=True)
    pl_ctx = re.search(r"^struct pl_ctx \{.*?^\};", COMPONENT_H.read_text(), re.M | re.S).group(0)
    (inc / "pipelink" / "component.h").write_text(SHIM + pl_ctx + "\n")
    for stub in ("cuda_bf16.h", "cuda_fp16.h"):
        (inc / stub).write_text("#pragma once\n")
    for inst in plan.instances:
        (inc / bind_header_name(inst)).write_text(bindgen.bind_header(inst.contract))
    unit = ["#include <pipelink/component.h>"] + [f'#include "{bind_header_name(i)}"' for i in plan.instances]
    unit += [s.read_text() for s in SOURCES] + [_host_glue(plan.glue.text)]
    head = next(s for s in plan.glue.statements if isinstance(s, ir.KernelHead))
    unit += ["#define SPLIT"] if "pl_split_rows" in plan.glue.text else []
    unit += [f"#define PARAMS pl_params_{head.link}", f"#define KERNEL {head.entry}", MAIN]
    (tmp_path / "host.cpp").write_text("\n".join(unit))
    exe = tmp_path / "host"
    built = subprocess.run([str(find_nvcc().path), "-x", "c++", "-std=c++17", "-O1", f"-I{inc}", "-Xcompiler",
                            "-Wno-unknown-pragmas", str(tmp_path / "host.cpp"), "-o", str(exe)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    feed = f"{plan.num_tiles} {kt} {plan.grid} {len(orders)}\n"
    feed += "\n".join(" ".join(map(str, o)) for o in orders) + "\n"
    return subprocess.run([str(exe)], input=feed, capture_output=True, text=True, timeout=60)


def _orders(grid: int) -> list[list[int]]:
    rng = random.Random(grid)
    shuffled = [rng.sample(range(grid), grid) for _ in range(4)]
    return [list(range(grid)), list(reversed(range(grid)))] + shuffled


@pytest.mark.parametrize("split, m, kt, grid", [
    ("stream_k", 2560, 7, 8),    # every block cuts two tiles
    ("stream_k", 1280, 3, 24),   # more blocks than tiles: pieces of one k-tile, blocks of none
    ("hybrid", 2560, 5, 6),      # whole tiles first, the last two cut three ways
    ("tiles", 2560, 7, 8),       # no split: the tile loop alone
])
def test_the_glue_text_computes_every_tile_once_in_any_block_order(tmp_path, split, m, kt, grid):
    plan = ksum_plan(ksum_packages(tmp_path), split, m, kt, grid)
    run = _run_on_host(tmp_path, plan, kt, _orders(grid))
    assert run.returncode == 0 and run.stdout == "ok\n", run.stdout + run.stderr

"""Link time: cold (empty cache) and warm (cache hit) links of the demo, the cost of the
conformance check (code against contract), and the pack + cold link of a CUTLASS-sized component
when the nvidia-cutlass headers are installed.

    python bench/link_time.py [--repeats N] [--out DIR]

Targets (on the 2-core CPU machine): demo cold link <= 5 s, warm <= 100 ms (issue 2); checking
adds <= 10 % to the demo's cold link (issue 5). "Without checking" means what pipelink did before
the check existed: no -lineinfo in nvcc/nvJitLink and no conformance stage.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from pathlib import Path

import pipelink
from pipelink import package, packer
from pipelink.backend import nvcc, nvjitlink
from pipelink.backend.cache import Cache
from pipelink.backend.toolchain import cutlass_include
from pipelink.demo import COMPONENTS
from pipelink.errors import ToolchainError
from pipelink.link import build, conform

from harness import ROOT, write_result
from pipelink.demo import packaged_spec


def timed(fn):
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


@contextlib.contextmanager
def checking_disabled():
    """pipelink as it was before the conformance check: no line info, no check."""
    saved = (nvcc.LTO_FLAGS, package.LTO_FLAGS, packer.LTO_FLAGS, build.LTO_FLAGS, nvjitlink.LINK_OPTIONS,
             build.LINK_OPTIONS, conform.check)
    lto = tuple(f for f in nvcc.LTO_FLAGS if f != "-lineinfo")
    link = tuple(f for f in nvjitlink.LINK_OPTIONS if f != "-lineinfo")
    nvcc.LTO_FLAGS = package.LTO_FLAGS = packer.LTO_FLAGS = build.LTO_FLAGS = lto
    nvjitlink.LINK_OPTIONS = build.LINK_OPTIONS = link
    conform.check = lambda plan, info: []
    try:
        yield
    finally:
        (nvcc.LTO_FLAGS, package.LTO_FLAGS, packer.LTO_FLAGS, build.LTO_FLAGS, nvjitlink.LINK_OPTIONS,
         build.LINK_OPTIONS, conform.check) = saved


def demo_links(repeats: int, work: Path, check: bool = True) -> dict:
    (work / "packages").mkdir(parents=True)
    os.environ["PIPELINK_CACHE_DIR"] = str(work / "pack-cache")  # the pack-time probe starts cold too
    pack_s = []
    for name in COMPONENTS:
        dt, _ = timed(lambda: pipelink.pack(ROOT / "components/raw" / f"{name}.cu",
                                            ROOT / "components/raw" / f"{name}.toml", work / "packages" / f"{name}.plc",
                                            check=check))
        pack_s.append(dt)
    (work / "link.toml").write_text(packaged_spec((ROOT / "examples/demo/link.toml").read_text()))
    pipelink.link(work / "link.toml", cache=Cache(enabled=False))  # warm the Python imports, not the cache
    cold, warm = [], []
    for i in range(repeats):
        cache = Cache(root=work / f"cache{i}")
        dt, k = timed(lambda: pipelink.link(work / "link.toml", cache=cache))
        assert k.plan.backend.link == "linked"
        cold.append(dt)
        for _ in range(5):
            dt, k = timed(lambda: pipelink.link(work / "link.toml", cache=cache))
            assert k.plan.backend.link == "cache hit"
            warm.append(dt)
    return {"pack_s": pack_s, "cold_link_s": cold, "warm_link_s": warm,
            "cold_link_median_s": statistics.median(cold), "warm_link_median_s": statistics.median(warm),
            "cold_target_s": 5.0, "warm_target_s": 0.1,
            "cold_ok": statistics.median(cold) <= 5.0, "warm_ok": statistics.median(warm) <= 0.1}


def cutlass_link(work: Path) -> dict:
    source = ROOT / "components/cutlass/gemm_sm90.cu"
    try:
        cutlass_include()  # the contract's headers = ["cutlass"]: pack finds them the same way
    except ToolchainError as exc:
        return {"skipped": exc.message}
    (work / "packages").mkdir(parents=True)
    os.environ["PIPELINK_CACHE_DIR"] = str(work / "pack-cache")
    pack_s, _ = timed(lambda: pipelink.pack(source, source.with_suffix(".toml"), work / "packages/gemm_sm90.plc"))
    (work / "link.toml").write_text(packaged_spec((ROOT / "examples/cutlass_gemm/link.toml").read_text()))
    link_s, k = timed(lambda: pipelink.link(work / "link.toml", cache=Cache(root=work / "cache")))
    res, opcodes = k.plan.backend.resources, k.plan.backend.sass.opcode_histogram
    return {"pack_s": pack_s, "cold_link_s": link_s, "registers": res.registers,
            "sass_instructions": res.instructions, "hgmma": opcodes.get("HGMMA.64x256x16.F32.BF16", 0)
            or sum(v for op, v in opcodes.items() if op.startswith("HGMMA")),
            "cubin_bytes": len(k.cubin)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", type=Path, default=None, help="results folder (default bench/results)")
    p.add_argument("--skip-cutlass", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="pipelink-bench-") as tmp:
        demo = demo_links(args.repeats, Path(tmp) / "demo")
        with checking_disabled():
            unchecked = demo_links(args.repeats, Path(tmp) / "unchecked", check=False)
        cutlass = {"skipped": "--skip-cutlass"} if args.skip_cutlass else cutlass_link(Path(tmp) / "cutlass")
    overhead = demo["cold_link_median_s"] / unchecked["cold_link_median_s"] - 1
    checking = {"cold_link_median_s_with": demo["cold_link_median_s"],
                "cold_link_median_s_without": unchecked["cold_link_median_s"], "overhead": overhead,
                "target": 0.10, "ok": overhead <= 0.10,
                "pack_median_s_with_probe": statistics.median(demo["pack_s"]),
                "pack_median_s_without_probe": statistics.median(unchecked["pack_s"]), "unchecked_runs": unchecked}
    path = write_result("link_time", {"demo": demo, "checking": checking, "cutlass_gemm": cutlass}, args.out)
    print(f"demo: cold link median {demo['cold_link_median_s']:.3f} s (target 5 s), warm {1e3 * demo['warm_link_median_s']:.1f} ms "
          f"(target 100 ms); cutlass: {cutlass}")
    print(f"checking: cold link {checking['cold_link_median_s_with']:.3f} s with vs "
          f"{checking['cold_link_median_s_without']:.3f} s without ({100 * overhead:+.1f} %, target <= 10 %); pack "
          f"{checking['pack_median_s_with_probe']:.2f} s with the probe vs {checking['pack_median_s_without_probe']:.2f} s")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

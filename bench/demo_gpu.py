"""On the GPU: the demo kernel linked by pipelink and its monolithic control, checked against the
reference and timed in one process; the collision example (pipelink vs symbol linking); the
smem->smem relayout test. Writes one JSON under bench/results (or --out).

    python bench/demo_gpu.py [--out DIR]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import pipelink  # noqa: E402
from pipelink.backend.inspect import inspect_cubin, normalized_sass  # noqa: E402
from pipelink.demo import COMPONENTS  # noqa: E402
from pipelink.gpucheck import run_checks  # noqa: E402

from common import write_result  # noqa: E402


def pack_all(sources: Path, names, out: Path, contracts=None) -> None:
    for name in names:
        contract = (contracts or {}).get(name, name)
        pipelink.pack(sources / f"{name}.cu", sources / f"{contract}.toml", out / "packages" / f"{name}.plc")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    result: dict = {}
    with tempfile.TemporaryDirectory(prefix="pipelink-gpu-") as tmp:
        work = Path(tmp)
        demo = work / "demo"
        pack_all(ROOT / "components/raw", COMPONENTS, demo)
        shutil.copyfile(ROOT / "examples/demo/link.toml", demo / "link.toml")
        kernels = {m: pipelink.link(demo / "link.toml", mode=m) for m in ("pipelink", "monolithic")}
        for m, k in kernels.items():
            k.save(demo / m)
        a, b = (inspect_cubin(kernels[m].cubin, kernels[m].plan.entry)[0] for m in ("pipelink", "monolithic"))
        # Two children, both orders, so that neither variant always runs first (clocks, caches).
        first = run_checks("tile_fold", demo, ["pipelink", "monolithic"])
        second = run_checks("tile_fold", demo, ["monolithic", "pipelink"])
        plan = kernels["pipelink"].plan
        moved = 32768 * 2048 * 4 + 32768 * 64 * 2
        timing = {}
        for mode in ("pipelink", "monolithic"):
            times = first[mode].get("times_ms", []) + second[mode].get("times_ms", [])
            timing[mode] = {"times_ms": times, "median_ms": statistics.median(times) if times else None}
        ratio = (timing["pipelink"]["median_ms"] / timing["monolithic"]["median_ms"]
                 if timing["pipelink"]["median_ms"] and timing["monolithic"]["median_ms"] else None)
        result["demo"] = {
            "kernel": "tile_fold: Y[m, j] = bf16(sum_c X[m, 64c + j]), M=32768, K=2048",
            "bytes_moved": moved, "correctness": {m: {k: v for k, v in first[m].items() if k != "times_ms"}
                                                  for m in first},
            "timing": timing, "linked_over_monolithic": ratio,
            "sass_identical_modulo_symbols": normalized_sass(a.instructions) == normalized_sass(b.instructions),
            "sass_identical_raw": a.instructions == b.instructions,
            "registers": plan.backend["resources"]["registers"], "dynamic_smem": plan.smem_bytes,
            "grid": plan.grid, "block": plan.block,
        }

        col = work / "collide"
        for op in ("sum", "max"):
            pipelink.pack(ROOT / "examples/collide" / f"block_{op}.cu", ROOT / "examples/collide" / f"block_{op}.toml",
                          col / "packages" / f"block_{op}.plc")
        shutil.copyfile(ROOT / "examples/collide/link.toml", col / "link.toml")
        warnings = {}
        for m in ("pipelink", "symbol"):
            k = pipelink.link(col / "link.toml", mode=m)
            k.save(col / m)
            warnings[m] = k.plan.warnings
        result["collide"] = {"results": run_checks("collide", col, ["pipelink", "symbol"], timeout=30),
                             "symbol_mode_warnings": warnings["symbol"]}

        rel = work / "relayout"
        pack_all(ROOT / "tests/components", ("tile_load", "tile_emit"), rel)
        shutil.copyfile(ROOT / "tests/components/link.toml", rel / "link.toml")
        pipelink.link(rel / "link.toml").save(rel / "pipelink")
        result["relayout"] = run_checks("relayout", rel, ["pipelink"])
    path = write_result("demo_gpu", result, args.out)
    d = result["demo"]
    print(f"demo: {d['correctness']}; median pipelink {d['timing']['pipelink']['median_ms']} ms, monolithic "
          f"{d['timing']['monolithic']['median_ms']} ms, ratio {ratio}; SASS identical: {d['sass_identical_modulo_symbols']}")
    print(f"collide: {result['collide']['results']}")
    print(f"relayout: {result['relayout']}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

"""On the GPU, in one call: `pipelink verify` on the demo (linked with --trace, and the monolithic
control), a seeded skipped tile, a seeded hang followed by a good verify, the collision example
(pipelink vs symbol linking), and the torch op inside torch.compile. Records wall times (the
harness overhead target: verify + bench of the demo <= 20 s) and the rung figures in one JSON.

    python bench/verify_gpu.py [--out DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests"))  # the seeded tile_store variants (issue 11 moves this replay into tests)

from rich.console import Console  # noqa: E402

import pipelink  # noqa: E402
from pipelink.demo import COMPONENTS  # noqa: E402

from common import write_result  # noqa: E402
from conftest import store_variant  # noqa: E402

TESTS = ROOT / "tests" / "components"


def summary(result) -> dict:
    return {"status": "pass" if result.passed else "fail",
            "rungs": {r.name: {"status": r.status, "detail": r.detail[:300], "seconds": round(r.seconds, 3),
                               "figures": r.figures} for r in result.rungs}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    con = Console(width=150)
    record: dict = {}
    with tempfile.TemporaryDirectory(prefix="pipelink-verify-") as tmp:
        demo = Path(tmp) / "demo"
        for name in COMPONENTS:
            pipelink.pack(ROOT / "components/raw" / f"{name}.cu", ROOT / "components/raw" / f"{name}.toml",
                          demo / "packages" / f"{name}.plc")
        for f in ("link.toml", "reference.py"):
            shutil.copyfile(ROOT / "examples/demo" / f, demo / f)
        spec = demo / "link.toml"
        good = demo / "packages" / "tile_store.plc"
        shutil.copyfile(good, demo / "good_store.plc")

        walls = {}
        for mode in ("pipelink", "monolithic"):
            t0 = time.perf_counter()
            result = pipelink.verify(spec, mode=mode, out_dir=demo / f"verify-{mode}", console=con)
            walls[mode] = time.perf_counter() - t0
            record[f"demo_{mode}"] = summary(result)
        t0 = time.perf_counter()
        traced = pipelink.verify(spec, out_dir=demo / "verify-trace", trace=True, profile=True, console=con)
        walls["pipelink_with_trace"] = time.perf_counter() - t0
        record["demo_trace"] = summary(traced)
        out_dir = args.out or HERE / "results"
        for png in ("timeline.png", "roofline.png"):
            if (demo / "verify-trace" / png).exists():
                shutil.copyfile(demo / "verify-trace" / png, out_dir / f"verify_gpu-{png}")
        record["verify_wall_s"] = walls
        bench = {m: record[f"demo_{m}"]["rungs"]["bench"]["figures"] for m in ("pipelink", "monolithic")}
        if all("median_ms" in b for b in bench.values()):
            record["linked_over_monolithic"] = bench["pipelink"]["median_ms"] / bench["monolithic"]["median_ms"]

        pipelink.pack(store_variant("tile_store_skip", demo / "skip_src"), ROOT / "components/raw/tile_store.toml", good)
        record["skipped_tile"] = summary(pipelink.verify(spec, out_dir=demo / "verify-skip", bench=False, console=con))
        pipelink.pack(store_variant("tile_store_hang", demo / "hang_src"), TESTS / "tile_store_hang.toml", good)
        t0 = time.perf_counter()
        record["hang"] = summary(pipelink.verify(spec, out_dir=demo / "verify-hang", bench=False, timeout=10,
                                                 console=con))
        record["hang"]["wall_s"] = time.perf_counter() - t0
        shutil.copyfile(demo / "good_store.plc", good)
        record["after_hang"] = summary(pipelink.verify(spec, out_dir=demo / "verify-after", bench=False, console=con))

        col = Path(tmp) / "collide"
        for op in ("sum", "max"):
            pipelink.pack(ROOT / "examples/collide" / f"block_{op}.cu", ROOT / "examples/collide" / f"block_{op}.toml",
                          col / "packages" / f"block_{op}.plc")
        for f in ("link.toml", "reference.py"):
            shutil.copyfile(ROOT / "examples/collide" / f, col / f)
        for mode in ("pipelink", "symbol"):
            record[f"collide_{mode}"] = summary(pipelink.verify(col / "link.toml", mode=mode, bench=False, timeout=10,
                                                                out_dir=col / mode, console=con))

        import torch
        op = pipelink.torch_op(pipelink.link(spec))
        x = torch.randn(32768, 2048, device="cuda")
        eager = op(x)
        compiled = torch.compile(lambda t: op(t * 1.0).float() + 0.0, fullgraph=True)(x)
        record["torch_op"] = {"compiled_equals_eager": bool(torch.equal(compiled, eager.float())),
                              "rel_l2_vs_fp64": float((eager.double() - x.view(32768, 32, 64).double().sum(1)).norm()
                                                      / x.view(32768, 32, 64).double().sum(1).norm())}
    path = write_result("verify_gpu", record, args.out)
    con.print(f"verify wall s: {record['verify_wall_s']}; linked/monolithic: {record.get('linked_over_monolithic')}")
    con.print(f"skipped tile: {record['skipped_tile']['rungs']['correctness']['status']} "
              f"{record['skipped_tile']['rungs']['correctness']['detail'][:120]}")
    con.print(f"hang: {record['hang']['rungs']['run']['status']} in {record['hang']['wall_s']:.1f} s; "
              f"after: {record['after_hang']['status']}")
    con.print(f"collide: pipelink {record['collide_pipelink']['status']}, symbol {record['collide_symbol']['status']}"
              f" ({record['collide_symbol']['rungs']['run']['status']}); torch op: {record['torch_op']}")
    con.print(f"wrote {path}")


if __name__ == "__main__":
    main()

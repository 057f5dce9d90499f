"""Issue 5's dynamic checks on the GPU, recorded: sanitize mode on the demo (must pass), on a seeded
smem overrun (must name the buffer) and on a seeded lost arrival (must name who waits on which
barrier), and compute-sanitizer's memcheck / racecheck / synccheck rungs on the relayout link.

    PYTHONPATH=src:tests python3 bench/sanitize_gpu.py [--out DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from rich.console import Console

import pipelink

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from common import write_result  # noqa: E402
from conftest import COLLIDE, DEMO_COMPONENTS, RAW, ROOT, store_variant  # noqa: E402,F401
from test_conformance import make  # noqa: E402

QUIET = Console(file=open("/dev/null", "w"), width=140)
TEST_COMPONENTS = ROOT / "tests" / "components"


def rungs(result) -> dict:
    return {r.name: {"status": r.status, "detail": r.detail, "errors": (r.figures or {}).get("errors")}
            for r in result.rungs}


def demo_folder(tmp: Path, store_source: Path | None = None, store_contract: Path | None = None) -> Path:
    for name in DEMO_COMPONENTS:
        pipelink.pack(RAW / f"{name}.cu", RAW / f"{name}.toml", tmp / "packages" / f"{name}.plc")
    if store_source:
        pipelink.pack(store_source, store_contract, tmp / "packages" / "tile_store.plc")
    for f in ("link.toml", "reference.py"):
        shutil.copyfile(ROOT / "examples" / "demo" / f, tmp / f)
    return tmp / "link.toml"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="pl-sanitize-"))
    cases = {}
    demo = demo_folder(tmp / "demo")
    cases["demo_sanitize"] = pipelink.verify(demo, out_dir=tmp / "demo" / "run", sanitize=True, bench=False,
                                             console=QUIET)
    overrun = make(tmp / "overrun", "dynamic/overrun", {}, False)
    cases["overrun_sanitize"] = pipelink.verify(overrun, out_dir=tmp / "overrun" / "run", sanitize=True,
                                                timeout=20, console=QUIET)
    hang = demo_folder(tmp / "hang", store_variant("tile_store_hang", tmp / "hang_src"),
                       TEST_COMPONENTS / "tile_store_hang.toml")
    cases["lost_arrival_plain"] = pipelink.verify(hang, out_dir=tmp / "hang" / "plain", bench=False, timeout=10,
                                                  console=QUIET)
    cases["lost_arrival_sanitize"] = pipelink.verify(hang, out_dir=tmp / "hang" / "run", sanitize=True, timeout=20,
                                                     console=QUIET)
    relayout = tmp / "relayout"
    for name in ("tile_load", "tile_emit"):
        pipelink.pack(TEST_COMPONENTS / f"{name}.cu", TEST_COMPONENTS / f"{name}.toml",
                      relayout / "packages" / f"{name}.plc")
    for f in ("link.toml", "reference.py"):
        shutil.copyfile(TEST_COMPONENTS / f, relayout / f)
    cases["relayout_compute_sanitizer"] = pipelink.verify(
        relayout / "link.toml", out_dir=relayout / "run", bench=False,
        sanitizers=("memcheck", "racecheck", "synccheck"), console=QUIET)
    payload = {name: rungs(r) for name, r in cases.items()}
    for name, r in payload.items():
        print(f"{name}:")
        for rung, v in r.items():
            print(f"  {rung:12s} {v['status']:8s} {v['detail'][:160]}")
    path = write_result("sanitize_gpu", payload, args.out)
    print("wrote", path)


if __name__ == "__main__":
    main()

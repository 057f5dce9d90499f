"""Where one `pipelink.verify(spec, bench=False)` spends its seconds (the GPU suite is mostly such calls): the
parent's pre-checks, link and dumps, the child's start (interpreter, imports, CUDA context) up to its first rung,
and each GPU rung. Llama decode blocks (the largest GPU test file), several in turn in one process.

    python bench/experiments/verify_cost.py --out DIR [--specs N] [--tag NAME]

Writes DIR/verify_cost-<tag>.json: per verify the parent's rungs, the child's start and rungs, the total."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = [(1, 16, "short"), (8, 512, "short"), (64, 16, "short"), (1, 4096, "long"), (64, 1000, "long_wt"),
           (8, 16, "short"), (33, 16, "short"), (1, 16, "long")]


def _shapes():
    spec = importlib.util.spec_from_file_location("llama_shapes", ROOT / "examples" / "llama_decode" / "shapes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _seconds(cmd: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", cmd], check=True)
    return round(time.perf_counter() - t0, 3)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--specs", type=int, default=len(CONFIGS))
    ap.add_argument("--tag", default="serial")
    ap.add_argument("--startup", action="store_true", help="also time bare interpreters (torch import, CUDA start)")
    ap.add_argument("--warm", action="store_true", help="the verifies inside pipelink.warm_child() (one GPU child)")
    args = ap.parse_args()
    from rich.console import Console

    import pipelink
    shapes = _shapes()
    quiet = Console(file=open("/dev/null", "w"), width=140)
    work = Path(tempfile.mkdtemp(prefix="verify-cost-"))
    record = {"tag": args.tag, "warm_child": args.warm, "verifies": []}
    if args.startup:
        record["startup_s"] = {
            "python": _seconds("pass"),
            "import torch": _seconds("import torch"),
            "torch + cuda context": _seconds("import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()"),
            "the verify child's imports": _seconds("import pipelink.verify.child"),
        }
    t0 = time.perf_counter()
    packages = shapes.pack(work / "packages")
    record["pack_s"] = round(time.perf_counter() - t0, 2)
    with pipelink.warm_child() if args.warm else contextlib.nullcontext():
        _verifies(record, shapes, packages, work, args.specs, quiet)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"verify_cost-{args.tag}.json").write_text(json.dumps(record, indent=1))
    return 0


def _verifies(record: dict, shapes, packages: Path, work: Path, count: int, quiet) -> None:
    import pipelink
    for i, (batch, context, attention) in enumerate(CONFIGS[:count]):
        spec = shapes.write_spec(work / f"spec{i}", packages, batch, context, attention)
        out = work / f"run{i}"
        start = time.time()
        result = pipelink.verify(spec, out_dir=out, bench=False, seeds=2, timeout=60, console=quiet)
        total = time.time() - start
        parent = {r.name: round(r.seconds or 0, 3) for r in result.rungs if r.name in ("pre-checks", "link", "dumps")}
        events = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]
        ready = next(e["t"] for e in events if e["event"] == "ready")
        first = next(e["t"] for e in events if e["event"] == "start")
        last = max(e["t"] for e in events)
        spawned = start + sum(parent.values())  # about when the child was started (the job file is tiny)
        record["verifies"].append({
            "config": f"B{batch}:L{context}:{attention}", "passed": result.passed, "total_s": round(total, 3),
            "parent_s": parent, "child_start_to_ready_s": round(ready - spawned, 3),
            "child_ready_to_first_rung_s": round(first - ready, 3),
            "child_rungs_s": {r.name: round(r.seconds or 0, 3) for r in result.rungs
                              if r.name in ("run", "correctness")},
            "child_exit_after_last_event_s": round(start + total - last, 3)})
        print(json.dumps(record["verifies"][-1]), flush=True)


if __name__ == "__main__":
    sys.exit(main())

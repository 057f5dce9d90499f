"""Does where a link's workspaces lie change its time? Two loads of one linked cubin (the paper
table's A/A) differed by 1.7 % at llama/b1_l16_long and MoE's 1024-token link by 0.85 % against
its monolithic control with identical SASS (`results/paper_table-gpu-20261202T160624.json`). Each
load allocates its own workspaces, which hold the grid-barrier counters every block polls; the
suspect is where those counters lie (which L2 partition serves the atomics).

    python bench/experiments/workspace_placement.py [--out DIR] [--copies 4] [--seconds 20]
        [--configs llama/b1_l16_short moe/qwen3_30b_a3b_1024 ...]

For each configuration (names of bench/configs.py), the linked cubin is loaded `copies` times, each
on workspaces of its own (own0, own1, ...), and `copies - 1` more times on own0's workspaces
(shared1, ...); all are timed interleaved on the same operands. Each copy's paired ratio against
own0 says what placement costs: if the own copies spread and the shared ones do not, the
workspace's address is the cause, and the benches should launch the variants they compare on one
set of workspaces (`Runtime.share_workspaces`). Writes results/workspace_placement-<gpu>-<stamp>.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import log, paired_ratio, paired_ratio_ci, rounds_for, time_interleaved, write_result  # noqa: E402

import configs  # noqa: E402  (bench/, on the path above)

DEFAULT_CONFIGS = ["llama/b1_l16_short", "llama/b1_l16_long", "llama/b64_l16_short", "moe/qwen3_30b_a3b_1024"]


def main() -> None:
    import pipelink
    from pipelink.spec import load_spec
    from pipelink.verify.child import Kernel
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=20.0, help="timing per configuration")
    ap.add_argument("--configs", nargs="*", default=DEFAULT_CONFIGS)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pipelink-placement-"))
    families = sorted({c.split("/")[0] for c in args.configs})
    specs = dict(configs.build(families, work, progress=log))
    missing = [c for c in args.configs if c not in specs]
    if missing:
        raise SystemExit(f"unknown configurations {missing}: bench/configs.py has {sorted(specs)}")
    result = {"copies": args.copies, "configs": []}
    for name in args.configs:
        kernel = pipelink.link(specs[name])
        folder = work / name.replace("/", "_")
        folder.mkdir(parents=True, exist_ok=True)
        files = {"cubin": str(folder / "k.cubin"), "manifest": str(folder / "k.manifest.json")}
        Path(files["cubin"]).write_bytes(kernel.cubin)
        Path(files["manifest"]).write_text(json.dumps(kernel.manifest))
        job = {"inputs": load_spec(specs[name]).verify.inputs}
        loads = {f"own{i}": Kernel(files, job) for i in range(args.copies)}
        for i in range(1, args.copies):
            loads[f"shared{i}"] = Kernel(files, job)
            loads[f"shared{i}"].runtime.share_workspaces(loads["own0"].runtime)
        tensors = {**loads["own0"].inputs(seed=0), **loads["own0"].outputs()}
        fns = {label: (lambda k=k: k.launch(tensors)) for label, k in loads.items()}
        reps = rounds_for(fns["own0"], args.seconds, len(fns))
        times = time_interleaved(fns, reps, seed=3)
        record = {"name": name, "reps": reps, "median_us": {k: t["median_ms"] * 1e3 for k, t in times.items()},
                  "over_own0": {k: paired_ratio(times[k], times["own0"]) for k in times if k != "own0"},
                  "over_own0_ci95": {k: paired_ratio_ci(times[k], times["own0"]) for k in times if k != "own0"},
                  # where each load's workspaces lie (device addresses): the shared ones are own0's
                  "workspaces": {k: {w: hex(a) for w, a in ld.runtime.workspace_addresses.items()} for k, ld in loads.items()}}
        own = [r for k, r in record["over_own0"].items() if k.startswith("own")]
        shared = [r for k, r in record["over_own0"].items() if k.startswith("shared")]
        record["own_spread"] = max(abs(1 - r) for r in own) if own else 0.0
        record["shared_spread"] = max(abs(1 - r) for r in shared) if shared else 0.0
        result["configs"].append(record)
        log(f"{name}: {record['median_us']['own0']:.1f} us; against own0, own copies "
            + " ".join(f"{r:.4f}" for r in own) + ", shared " + " ".join(f"{r:.4f}" for r in shared))
    path = write_result("workspace_placement", result, args.out)
    log(f"wrote {path}")


if __name__ == "__main__":
    main()

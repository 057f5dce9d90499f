"""The CPU half of the paper's table (issue 16, item 2): for every configuration of the case
studies that exists (bench/configs.py), the SASS of the pipelink-linked cubin against its monolithic control (one
compilation unit from the same sources), normalized for symbol addresses; identical, or how they
differ (instruction count, opcode histogram, registers, spills).

    python bench/sass_compare.py [--out DIR] [--only demo,qwen,bias_gelu,block_reduce,collide,moe,perturb]

Writes results/sass_compare-cpu-<stamp>.json with `configs` (each: `name`, `sass_identical`,
`instructions`, `registers`, `spills`, and for a difference `opcode_diff` and `first_difference`).
Needs nvcc, nvJitLink and cuobjdump, and the nvidia-cutlass wheel for the Qwen and bias_gelu rows.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
import time
from collections import Counter
from pathlib import Path

from configs import FAMILIES, build
from harness import log, write_result

import pipelink
from pipelink.backend.inspect import inspect_cubin, normalized_sass
from pipelink.runtime import workspace_layout


def compare(name: str, spec: Path) -> dict:
    """One configuration: link both ways, compare the normalized SASS."""
    t0 = time.perf_counter()
    kernels = {mode: pipelink.link(spec, mode=mode) for mode in ("pipelink", "monolithic")}
    infos = {mode: inspect_cubin(k.cubin, k.plan.entry)[0] for mode, k in kernels.items()}
    sass = {mode: normalized_sass(info.instructions) for mode, info in infos.items()}
    row = {"name": name, "sass_identical": sass["pipelink"] == sass["monolithic"],
           "instructions": {m: len(s) for m, s in sass.items()},
           "registers": {m: k.plan.backend.resources.registers for m, k in kernels.items()},
           "spills": {m: k.plan.backend.resources.local for m, k in kernels.items()},
           # what was linked, whole: the manifest holds the cubin's sha256, the launch shape and the operands
           "manifest_sha256": {m: hashlib.sha256(json.dumps(k.manifest, sort_keys=True).encode()).hexdigest()
                               for m, k in kernels.items()},
           # how many workspaces the link has (paper_table launches both modes on the linked one's)
           "workspaces": len(workspace_layout(kernels["pipelink"].manifest))}
    if not row["sass_identical"]:
        ops = {m: Counter(i.split()[0] for i in s if i.split()) for m, s in sass.items()}
        row["opcode_diff"] = {op: ops["pipelink"][op] - ops["monolithic"][op]
                              for op in ops["pipelink"] | ops["monolithic"]
                              if ops["pipelink"][op] != ops["monolithic"][op]}
        at = next((i for i, (a, b) in enumerate(zip(sass["pipelink"], sass["monolithic"])) if a != b),
                  min(map(len, sass.values())))
        row["first_difference"] = {"index": at, **{m: s[at] if at < len(s) else None for m, s in sass.items()}}
    row["seconds"] = time.perf_counter() - t0
    log(f"  {name}: {'identical' if row['sass_identical'] else 'DIFFERENT'} ({row['instructions']['pipelink']} "
        f"instructions, {row['registers']['pipelink']} registers)")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="results folder (default bench/results)")
    ap.add_argument("--only", default=",".join(FAMILIES), help=f"comma-separated subset of {', '.join(FAMILIES)}")
    args = ap.parse_args()
    families = [f for f in args.only.split(",") if f]
    work = Path(tempfile.mkdtemp(prefix="pipelink-sass-"))
    rows = [compare(name, spec) for name, spec in build(families, work, log)]
    identical = sum(r["sass_identical"] for r in rows)
    summary = {"configs": rows, "identical": identical, "total": len(rows),
               "identical_fraction": identical / len(rows) if rows else None}
    path = write_result("sass_compare", summary, args.out)
    log(f"{identical} of {len(rows)} configurations identical; wrote {path}")


if __name__ == "__main__":
    main()

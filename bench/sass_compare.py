"""The CPU half of the paper's table (issue 16, item 2): for every configuration of the case
studies that exists, the SASS of the pipelink-linked cubin against its monolithic control (one
compilation unit from the same sources), normalized for symbol addresses; identical, or how they
differ (instruction count, opcode histogram, registers, spills).

    python bench/sass_compare.py [--out DIR] [--only demo,qwen,bias_gelu,block_reduce,collide]

Writes results/sass_compare-cpu-<stamp>.json with `configs` (each: `name`, `sass_identical`,
`instructions`, `registers`, `spills`, and for a difference `opcode_diff` and `first_difference`).
Needs nvcc, nvJitLink and cuobjdump, and the nvidia-cutlass wheel for the Qwen and bias_gelu rows.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path

from harness import ROOT, example, log, write_result

import pipelink
from pipelink.backend.inspect import inspect_cubin, normalized_sass

import demo_bw  # the demo's packages and its kernels table (bench/demo_bw.py)

FAMILIES = ("demo", "qwen", "bias_gelu", "block_reduce", "collide")


def compare(name: str, spec: Path) -> dict:
    """One configuration: link both ways, compare the normalized SASS."""
    t0 = time.perf_counter()
    kernels = {mode: pipelink.link(spec, mode=mode) for mode in ("pipelink", "monolithic")}
    infos = {mode: inspect_cubin(k.cubin, k.plan.entry)[0] for mode, k in kernels.items()}
    sass = {mode: normalized_sass(info.instructions) for mode, info in infos.items()}
    row = {"name": name, "sass_identical": sass["pipelink"] == sass["monolithic"],
           "instructions": {m: len(s) for m, s in sass.items()},
           "registers": {m: k.plan.backend.resources.registers for m, k in kernels.items()},
           "spills": {m: k.plan.backend.resources.local for m, k in kernels.items()}}
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


def demo_configs(work: Path) -> list[tuple[str, Path]]:
    packages = demo_bw.pack_all(work)
    out = []
    for name, (source, facts, _, _) in demo_bw.KERNELS.items():
        spec = demo_bw.write_spec(work, name, source, facts)
        text = spec.read_text().replace('package = "packages/', f'package = "{packages}/')
        spec.write_text(text)
        out.append((f"demo/{name}", spec))
    return out


def qwen_configs(work: Path) -> list[tuple[str, Path]]:
    shapes = example("qwen_mlp/shapes.py")
    packages = shapes.pack(work)
    out = []
    for name, shape in shapes.SHAPES.items():
        for config in shapes.CANDIDATES[name]:
            folder = work / name / shapes.candidate_dir(config)
            out.append((f"qwen/{name}/{shapes.candidate_dir(config)}", shapes.write_spec(folder, packages, shape, config)))
        if shape[3]:  # the GEMM alone beside the fused gate/up (identity epilogue)
            m, k, n, _ = shape
            config = shapes.gemm_alone_config(shapes.CANDIDATES[name][0])
            out.append((f"qwen/{name}/gemm_alone", shapes.write_spec(work / name / "alone", packages, (m, k, n, 0),
                                                                     config)))
    return out


def bias_gelu_configs(work: Path) -> list[tuple[str, Path]]:
    shapes = example("bias_gelu/shapes.py")
    packages = shapes.pack(work)
    return [(f"bias_gelu/{name}/{'_'.join(map(str, config))}",
             shapes.write_spec(work / name / "_".join(map(str, config)), packages, shapes.SHAPES[name], config))
            for name, configs in shapes.CANDIDATES.items() for config in configs]


def block_reduce_configs(work: Path) -> list[tuple[str, Path]]:
    packages = work / "packages"
    pipelink.pack(ROOT / "components/raw/bulk_producer.cu", ROOT / "components/raw/bulk_producer.toml",
                  packages / "bulk_producer.plc")
    pipelink.pack(ROOT / "components/cub/cub_sum.cu", ROOT / "components/cub/cub_sum.toml", packages / "cub_sum.plc",
                  variants=[{"block_threads": 128}, {"block_threads": 160}])  # alone (the probe), with the producer
    shutil.copyfile(ROOT / "examples/block_reduce/link.toml", work / "link.toml")
    return [("block_reduce", work / "link.toml")]


def collide_configs(work: Path) -> list[tuple[str, Path]]:
    src = ROOT / "examples" / "collide"
    for name in ("block_sum", "block_max"):
        pipelink.pack(src / f"{name}.cu", src / f"{name}.toml", work / "packages" / f"{name}.plc")
    shutil.copyfile(src / "link.toml", work / "link.toml")
    return [("collide", work / "link.toml")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="results folder (default bench/results)")
    ap.add_argument("--only", default=",".join(FAMILIES), help=f"comma-separated subset of {', '.join(FAMILIES)}")
    args = ap.parse_args()
    families = [f for f in args.only.split(",") if f]
    work = Path(tempfile.mkdtemp(prefix="pipelink-sass-"))
    builders = {"demo": demo_configs, "qwen": qwen_configs, "bias_gelu": bias_gelu_configs,
                "block_reduce": block_reduce_configs, "collide": collide_configs}
    rows = []
    for family in families:
        log(f"{family}: packing")
        for name, spec in builders[family](work / family):
            rows.append(compare(name, spec))
    identical = sum(r["sass_identical"] for r in rows)
    summary = {"configs": rows, "identical": identical, "total": len(rows),
               "identical_fraction": identical / len(rows) if rows else None}
    path = write_result("sass_compare", summary, args.out)
    log(f"{identical} of {len(rows)} configurations identical; wrote {path}")


if __name__ == "__main__":
    main()
